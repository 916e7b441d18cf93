package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools for what surrounds a session's code: the templates a session
// may run on, and the ports of a session's sandbox reached from outside
// (a web app the code serves, shown to the user).

// TemplatesIn is list_templates' input (none).
type TemplatesIn struct{}

// TemplateOut is a template a session may run on.
type TemplateOut struct {
	Name      string   `json:"name"`
	Version   string   `json:"version"`
	Languages []string `json:"languages" jsonschema:"the languages whose interpreter it has"`
	Default   bool     `json:"default,omitempty" jsonschema:"the template of a session that names none"`
}

// TemplatesOut is list_templates' structured result.
type TemplatesOut struct {
	Templates []TemplateOut `json:"templates"`
	Default   string        `json:"default,omitempty" jsonschema:"the template of a session that names none (absent: the server's own root)"`
}

// PortIn is expose_port's input.
type PortIn struct {
	Port      int    `json:"port" jsonschema:"the TCP port a program in the sandbox listens on (1-65535, on any address of the sandbox)"`
	Public    bool   `json:"public,omitempty" jsonschema:"anyone with the URL may reach it (only if the server allows public ports); otherwise it is private: the one-time link opens it in one browser"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// PortOut is a port of a session reached from outside.
type PortOut struct {
	SessionID     string    `json:"session_id"`
	Port          int       `json:"port"`
	Public        bool      `json:"public"`
	URL           string    `json:"url,omitempty" jsonschema:"the port's own address, for browsers (absent: the server has no ports.domain)"`
	Path          string    `json:"path" jsonschema:"the port under the API's address, for programs with an API key"`
	Link          string    `json:"link,omitempty" jsonschema:"open once in a browser to reach a private port (it sets a cookie there), until link_expires_at"`
	LinkExpiresAt time.Time `json:"link_expires_at,omitzero"`
}

// ClosePortIn is close_port's input.
type ClosePortIn struct {
	Port      int    `json:"port" jsonschema:"the port to close"`
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// PortsIn is list_ports' input.
type PortsIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"a session from create_session; without it, this connection's default python session"`
}

// PortsOut is list_ports' structured result.
type PortsOut struct {
	SessionID string    `json:"session_id"`
	Ports     []PortOut `json:"ports"`
}

// ClosePortOut is close_port's structured result.
type ClosePortOut struct {
	SessionID string `json:"session_id"`
	Port      int    `json:"port"`
	Closed    bool   `json:"closed"`
}

func (s *Server) addPortTools() {
	yes, no := true, false
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "list_templates",
		Title: "List templates",
		Description: "Lists the templates a session may run on (create_session's template): root filesystems with their " +
			"packages, as the operator registered them, with the languages each has.",
		Annotations: &mcp.ToolAnnotations{Title: "List templates", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listTemplates)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "expose_port",
		Title: "Expose a port",
		Description: "Makes a port a program in a session's sandbox listens on (a web app, a notebook, an API the code " +
			"started, e.g. python -m http.server 8000 in the background) reachable from outside, and returns its " +
			"addresses: a one-time link that opens a private port in one browser, its URL, and its path on the API. " +
			"Give the link to the user; it works once. Start the program first (run_command with & or nohup).",
		Annotations: &mcp.ToolAnnotations{Title: "Expose a port", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &yes},
	}, s.exposePort)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "list_ports",
		Title:       "List exposed ports",
		Description: "Lists the ports of a session reached from outside, with their addresses.",
		Annotations: &mcp.ToolAnnotations{Title: "List exposed ports", ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listPorts)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:        "close_port",
		Title:       "Close a port",
		Description: "Stops a port of a session being reached from outside (the program keeps running inside).",
		Annotations: &mcp.ToolAnnotations{Title: "Close a port", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, s.closePort)
}

func (s *Server) listTemplates(ctx context.Context, req *mcp.CallToolRequest, _ TemplatesIn) (*mcp.CallToolResult, TemplatesOut, error) {
	out := TemplatesOut{Templates: []TemplateOut{}}
	list, err := s.o.Client(header(req.Extra)).Templates(ctx)
	if err != nil {
		return failed(err), out, nil
	}
	out.Default = list.Default
	var b strings.Builder
	for _, t := range list.Templates {
		langs := t.Languages
		if langs == nil {
			langs = []string{}
		}
		out.Templates = append(out.Templates, TemplateOut{Name: t.Name, Version: t.Version, Languages: langs, Default: t.Default})
		fmt.Fprintf(&b, "%s (version %s): %s%s\n", t.Name, t.Version, strings.Join(t.Languages, ", "), map[bool]string{true: "; the default"}[t.Default])
	}
	if len(list.Templates) == 0 {
		b.WriteString("no templates: sessions run on the server's own root\n")
	}
	text, _ := clip(b.String(), fieldCap)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

func (s *Server) exposePort(ctx context.Context, req *mcp.CallToolRequest, in PortIn) (*mcp.CallToolResult, PortOut, error) {
	out := PortOut{Port: in.Port}
	if in.Port < 1 || in.Port > 65535 {
		return failed(argError("port %d must be between 1 and 65535", in.Port)), out, nil
	}
	api := s.o.Client(header(req.Extra))
	id, note, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	out.SessionID = id
	p, err := api.OpenPort(ctx, id, in.Port, in.Public)
	if err != nil {
		return failed(err), out, nil
	}
	out = PortOut{SessionID: id, Port: p.Port, Public: p.Public, URL: p.URL, Path: p.Path, Link: p.Link, LinkExpiresAt: p.LinkExpiresAt}
	var b strings.Builder
	fmt.Fprintf(&b, "port %d of session %s is reachable from outside", p.Port, id)
	switch {
	case p.Public && p.URL != "":
		fmt.Fprintf(&b, " by anyone at %s", p.URL)
	case p.Link != "":
		fmt.Fprintf(&b, ": open %s once in a browser (until %s); then %s works in that browser", p.Link, p.LinkExpiresAt.Format(time.RFC3339), p.URL)
	default:
		fmt.Fprintf(&b, " at %s on the API's address, with an API key (the server has no ports.domain for browser addresses)", p.Path)
	}
	if note != "" {
		b.WriteString("\nnote: " + note)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

func (s *Server) listPorts(ctx context.Context, req *mcp.CallToolRequest, in PortsIn) (*mcp.CallToolResult, PortsOut, error) {
	out := PortsOut{Ports: []PortOut{}}
	api := s.o.Client(header(req.Extra))
	id, _, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	out.SessionID = id
	list, err := api.Ports(ctx, id)
	if err != nil {
		return failed(err), out, nil
	}
	var b strings.Builder
	for _, p := range list {
		out.Ports = append(out.Ports, PortOut{SessionID: id, Port: p.Port, Public: p.Public, URL: p.URL, Path: p.Path})
		where := p.URL
		if where == "" {
			where = p.Path
		}
		fmt.Fprintf(&b, "port %d (%s): %s\n", p.Port, map[bool]string{true: "public", false: "private"}[p.Public], where)
	}
	if len(list) == 0 {
		b.WriteString("no port of this session is exposed (expose_port exposes one)\n")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
}

func (s *Server) closePort(ctx context.Context, req *mcp.CallToolRequest, in ClosePortIn) (*mcp.CallToolResult, ClosePortOut, error) {
	out := ClosePortOut{Port: in.Port}
	api := s.o.Client(header(req.Extra))
	id, _, err := s.session(ctx, req, api, in.SessionID)
	if err != nil {
		return failed(err), out, nil
	}
	out.SessionID = id
	if err := api.ClosePort(ctx, id, in.Port); err != nil {
		return failed(err), out, nil
	}
	out.Closed = true
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("port %d of session %s is closed", in.Port, id)}}}, out, nil
}
