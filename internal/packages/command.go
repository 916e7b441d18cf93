package packages

import "strings"

// An install typed as a shell command — `npm install X` in a JavaScript
// session, `pip install X` in a Python one, as agents and MCP run_command
// do — takes the path of the API's packages (the operator's sources
// only, the download sandbox, the audit) instead of a shell that has no
// route out. Anything more than package names and a few harmless flags
// runs as the shell command it is.

// Command is an install command line: its manager and packages.
type Command struct {
	Manager  string
	Packages []string
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

// ParseCommand recognises an install command line of manager (a session's
// language's: runtimes' PackageManager; "" recognises none).
func ParseCommand(manager, line string) (Command, bool) {
	f := strings.Fields(line)
	var rest []string
	switch {
	case manager == Npm && len(f) >= 3 && f[0] == "npm" && (f[1] == "install" || f[1] == "i" || f[1] == "add"):
		rest = f[2:]
	case manager == Pip && len(f) >= 3 && (f[0] == "pip" || f[0] == "pip3") && f[1] == "install":
		rest = f[2:]
	case manager == Pip && len(f) >= 5 && (f[0] == "python" || f[0] == "python3") && f[1] == "-m" && f[2] == "pip" && f[3] == "install":
		rest = f[4:]
	default:
		return Command{}, false
	}
	var pkgs []string
	for _, a := range rest {
		switch {
		case ignoredInstallFlags[a]:
		case strings.HasPrefix(a, "-") || !packageToken().MatchString(a) || localPath(manager, a):
			return Command{}, false
		default:
			pkgs = append(pkgs, a)
		}
	}
	return Command{Manager: manager, Packages: pkgs}, len(pkgs) > 0
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
		return !(manager == Npm && strings.HasPrefix(a, "@") && strings.Count(a, "/") == 1)
	}
	return false
}
