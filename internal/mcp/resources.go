package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/url"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/errdefs"
)

const sessionsURI = "airlock://sessions"

func (s *Server) addResources() {
	s.srv.AddResource(&mcp.Resource{
		URI: sessionsURI, Name: "sessions", Title: "Sessions",
		Description: "The sessions the caller may use, live and paused (state), as JSON.",
		MIMEType:    "application/json",
	}, s.readSessions)
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: sessionsURI + "/{session}/files/{+path}", Name: "file", Title: "A file of a session",
		Description: "A file in a session's /workspace (execute_code lists the files it wrote, and links them when this connection takes resource links). At most 8 MiB; larger files go through the HTTP files API.",
	}, s.readFileResource)
}

func (s *Server) readSessions(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	list, err := s.o.Client(header(req.Extra)).Sessions(ctx)
	if err != nil {
		return nil, errors.New(shown(err))
	}
	out := make([]SessionOut, 0, len(list))
	for i := range list {
		out = append(out, sessionOut(&list[i]))
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: sessionsURI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// readFileResource serves airlock://sessions/{session}/files/{+path}.
func (s *Server) readFileResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, sessionsURI+"/")
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	id, p, ok := strings.Cut(rest, "/files/")
	if !ok || id == "" || p == "" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if unescaped, err := url.PathUnescape(p); err == nil {
		p = unescaped
	}
	p, err := workspacePath(p, true)
	if err == nil {
		err = sessionArg(id)
	}
	if err != nil {
		return nil, errors.New(shown(err))
	}
	api := s.o.Client(header(req.Extra))
	rc, err := api.Download(ctx, id, p)
	if errdefs.KindOf(err).Err == errdefs.ErrNotFound || errdefs.KindOf(err).Err == errdefs.ErrGone {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, errors.New(shown(err))
	}
	defer rc.Close()
	data, err := readCapped(rc, readMax)
	if err != nil {
		return nil, errors.New(shown(err))
	}
	rcnt := &mcp.ResourceContents{URI: uri, MIMEType: mimeOf(p)}
	if strings.HasPrefix(rcnt.MIMEType, "text/") || rcnt.MIMEType == "application/json" {
		rcnt.Text = string(data)
	} else {
		rcnt.Blob = data
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rcnt}}, nil
}

// mimeOf is a file's media type by its extension.
func mimeOf(p string) string {
	t := mime.TypeByExtension(path.Ext(p))
	if t == "" {
		switch strings.ToLower(path.Ext(p)) {
		case ".py", ".sh", ".js", ".md", ".txt", ".log", ".csv", ".tsv", ".yaml", ".yml", ".toml", ".ini":
			return "text/plain"
		}
		return "application/octet-stream"
	}
	if mt, _, err := mime.ParseMediaType(t); err == nil {
		return mt
	}
	return t
}
