package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// An install typed as a shell command — `npm install X` in a JavaScript
// session, `pip install X` in a Python one, as agents and MCP run_command
// do — takes the path of POST .../packages (the operator's sources only,
// the download sandbox, the audit) instead of a shell that has no route
// out. Anything more than package names and a few harmless flags runs as
// the shell command it is.

type installLine struct {
	manager string
	pkgs    []string
}

// A plain package token: no shell syntax (quotes, redirections,
// substitutions, globs, separators); the installer's own parser checks it
// further.
var packageToken = lazyRegexp(`^[A-Za-z0-9@/._~^=!+,\[\]-]+$`)

var ignoredInstallFlags = map[string]bool{
	"-q": true, "--quiet": true, "-s": true, "--silent": true, "-S": true, "--save": true,
	"--no-fund": true, "--no-audit": true, "-U": true, "--upgrade": true, "--no-input": true,
	"--disable-pip-version-check": true,
}

// parseInstall recognises an install command line for a session of lang.
func parseInstall(lang, line string) (installLine, bool) {
	f := strings.Fields(line)
	var rest []string
	var manager string
	switch {
	case lang == "javascript" && len(f) >= 3 && f[0] == "npm" && (f[1] == "install" || f[1] == "i" || f[1] == "add"):
		manager, rest = "npm", f[2:]
	case lang == "python" && len(f) >= 3 && (f[0] == "pip" || f[0] == "pip3") && f[1] == "install":
		manager, rest = "pip", f[2:]
	case lang == "python" && len(f) >= 5 && (f[0] == "python" || f[0] == "python3") && f[1] == "-m" && f[2] == "pip" && f[3] == "install":
		manager, rest = "pip", f[4:]
	default:
		return installLine{}, false
	}
	var pkgs []string
	for _, a := range rest {
		switch {
		case ignoredInstallFlags[a]:
		case strings.HasPrefix(a, "-") || !packageToken().MatchString(a) || localPath(manager, a):
			return installLine{}, false
		default:
			pkgs = append(pkgs, a)
		}
	}
	return installLine{manager: manager, pkgs: pkgs}, len(pkgs) > 0
}

// runInstallCommand carries out a recognised install command as a
// foreground command: the installer's failure is the command's (exit 1,
// the reason on stderr), as a shell's npm or pip would report it.
func (s *Session) runInstallCommand(ctx context.Context, req apitype.CommandRequest, in installLine, emit func(apitype.Event)) (*apitype.CommandResult, error) {
	s.cmds.mu.Lock()
	s.cmds.next++
	id := "c" + strconv.Itoa(s.cmds.next)
	s.cmds.mu.Unlock()
	start := time.Now()
	res := apitype.CommandResult{ID: id, Command: req.Command, State: apitype.CommandExited, StartedAt: start, ExitCode: ptr(0)}
	out, err := s.InstallPackages(ctx, apitype.PackagesRequest{Manager: in.manager, Packages: in.pkgs})
	switch {
	case err == nil:
		var names []string
		for _, p := range out.Installed {
			names = append(names, p.Name+"-"+p.Version)
		}
		res.Stdout = "Successfully installed " + strings.Join(names, " ") + "\n"
	case errors.Is(err, errdefs.ErrGone) || errors.Is(err, errdefs.ErrLimit) || errors.Is(err, errdefs.ErrQuota) || errors.Is(err, errdefs.ErrConflict) || ctx.Err() != nil:
		return nil, err // the session's state, not the install's outcome
	default:
		res.ExitCode = ptr(1)
		res.Stderr = fmt.Sprintf("airlock: %s install %s: %s\n", in.manager, strings.Join(in.pkgs, " "), errdefs.Message(err))
	}
	res.DurationMs = ms(time.Since(start))
	if emit != nil {
		if res.Stdout != "" {
			emit(apitype.Event{Type: apitype.EventStdout, Text: res.Stdout})
		}
		if res.Stderr != "" {
			emit(apitype.Event{Type: apitype.EventStderr, Text: res.Stderr})
		}
		emit(apitype.Event{Type: apitype.EventEnd, Command: &res})
	}
	return &res, nil
}

// localPath: a directory or an archive already in the sandbox installs
// offline in the shell as it always did.
func localPath(manager, a string) bool {
	if strings.HasPrefix(a, ".") || strings.HasPrefix(a, "/") || strings.HasPrefix(a, "~") {
		return true
	}
	for _, ext := range []string{".whl", ".tar.gz", ".tgz", ".zip"} {
		if strings.HasSuffix(a, ext) {
			return true
		}
	}
	if strings.Contains(a, "/") {
		// npm's scoped names (@scope/name) are the one kind of name with
		// a slash.
		return !(manager == "npm" && strings.HasPrefix(a, "@") && strings.Count(a, "/") == 1)
	}
	return false
}
