package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
)

// InstallIn is install_packages' input.
type InstallIn struct {
	Packages  []string `json:"packages" jsonschema:"requirements: names with an optional version, such as pandas==2.2 or requests>=2 (pip), lodash@4 (npm); no URLs, paths or options"`
	Manager   string   `json:"manager,omitempty" jsonschema:"pip (python sessions) or npm (javascript sessions); by default the one of the session's language"`
	SessionID string   `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default session of the manager's language"`
}

// PackageOut is one installed package.
type PackageOut struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// InstallOut is install_packages' structured result.
type InstallOut struct {
	SessionID  string       `json:"session_id"`
	Installed  []PackageOut `json:"installed"`
	DurationMs float64      `json:"duration_ms"`
}

// addInstallTool offers install_packages: only when the server installs
// with at least one manager, so that a model is never offered a tool
// that can only fail.
func (s *Server) addInstallTool() {
	if len(s.o.Installs) == 0 {
		return
	}
	no := false
	managers := anys(s.o.Installs)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "install_packages",
		Title: "Install packages",
		Description: "Installs packages (" + strings.Join(s.o.Installs, ", ") + ") into a session from the index the server's operator " +
			"configured, with their dependencies: they import at once in that session, whose state is kept. The session itself " +
			"still has no network; the server may allow or deny package names.",
		InputSchema: withEnum[InstallIn]("manager", managers),
		Annotations: &mcp.ToolAnnotations{Title: "Install packages", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, s.installPackages)
}

func (s *Server) installPackages(ctx context.Context, req *mcp.CallToolRequest, in InstallIn) (*mcp.CallToolResult, InstallOut, error) {
	out := InstallOut{Installed: []PackageOut{}}
	api := s.o.Client(header(req.Extra))
	manager := in.Manager
	if manager == "" && in.SessionID != "" {
		// The manager of the named session's language.
		if err := sessionArg(in.SessionID); err != nil {
			return failed(err), out, nil
		}
		info, err := api.Session(ctx, in.SessionID)
		if err != nil {
			return failed(err), out, nil
		}
		for m, lang := range s.o.Managers {
			if lang == info.Language {
				manager = m
			}
		}
	}
	if manager == "" {
		manager = s.o.Installs[0]
	}
	if !slices.Contains(s.o.Installs, manager) {
		return failed(argError("manager %q: this server installs with %s", manager, strings.Join(s.o.Installs, " and "))), out, nil
	}
	id, note, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	// An install runs in the session like code: it takes its turn.
	release, err := s.turn(ctx, req.Session, id)
	if err != nil {
		return failed(err), out, nil
	}
	defer release()
	res, err := api.InstallPackages(ctx, id, apitype.PackagesRequest{Manager: manager, Packages: in.Packages})
	if err != nil {
		return failed(err), out, nil
	}
	out = InstallOut{SessionID: id, Installed: []PackageOut{}, DurationMs: res.DurationMs}
	var names []string
	for _, p := range res.Installed {
		out.Installed = append(out.Installed, PackageOut{Name: p.Name, Version: p.Version})
		names = append(names, p.Name+" "+p.Version)
	}
	var b strings.Builder
	if note != "" {
		fmt.Fprintf(&b, "note: %s\n", note)
	}
	fmt.Fprintf(&b, "installed with %s: %s [session %s, %.0f ms]", manager, strings.Join(names, ", "), id, res.DurationMs)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}
