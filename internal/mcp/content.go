package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// What a tool result carries besides text is the client's choice: text
// alone by default, which every agent framework's converter turns into a
// request its model provider accepts (e2e/agents/converters.test.mjs
// captures them). Images and resource links are opt-in, server-wide
// (mcp.content, airlock mcp --content) or per HTTP client (/mcp?content=),
// for clients that show them or pass them on well (Claude Desktop, the
// MCP Inspector; Anthropic models through LangChain or the Vercel AI SDK
// take images).

// contentHeader carries an HTTP request's ?content= to the tools, which
// the SDK hands the request's header but not its URL. A client's own
// header of that name is dropped.
const contentHeader = "X-Airlock-Mcp-Content"

// blocks is what a result may carry besides text.
type blocks struct {
	image, resourceLink, resource bool
}

func blocksOf(list []string) blocks {
	return blocks{
		image:        slices.Contains(list, "image"),
		resourceLink: slices.Contains(list, "resource_link"),
		resource:     slices.Contains(list, "resource"),
	}
}

// blocks is what results to the request of extra may carry: the HTTP
// client's ?content=, else the server's mcp.content.
func (s *Server) blocks(extra *mcp.RequestExtra) blocks {
	if h := header(extra); h != nil {
		if v, ok := h[contentHeader]; ok {
			return blocksOf(splitList(strings.Join(v, ",")))
		}
	}
	return blocksOf(s.o.Content)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// withContent reads /mcp's query: content= (a comma-separated list of
// config.MCPContent, empty for text only) is the only parameter, and
// anything else is a 400, never silently ignored.
func withContent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(contentHeader)
		q := r.URL.Query()
		for k := range q {
			if k != "content" {
				badQuery(w, fmt.Errorf("%w: /mcp takes one parameter, content (%s, comma-separated), not %q", errdefs.ErrInvalidArgument, strings.Join(config.MCPContent, ", "), k))
				return
			}
		}
		if v, ok := q["content"]; ok {
			list := splitList(strings.Join(v, ","))
			if err := config.CheckMCPContent(list); err != nil {
				badQuery(w, fmt.Errorf("/mcp?content=: %w", err))
				return
			}
			r.Header.Set(contentHeader, strings.Join(list, ","))
		}
		next.ServeHTTP(w, r)
	})
}

func badQuery(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(apitype.ErrorBody{Error: apitype.ErrorDetail{Code: errdefs.Code(err), Message: errdefs.Message(err)}})
}

// notAttached says why a display output's image is not in the result.
func notAttached(b blocks) string {
	if !b.image {
		return "not attached: this connection takes text only"
	}
	return fmt.Sprintf("not attached: at most %d images a result", maxImages)
}
