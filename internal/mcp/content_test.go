package mcp_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/client"
	"airlock/internal/mcp"
)

// By default a result is text alone, which every agent framework turns
// into a request its model provider accepts: the files code wrote are
// listed (no resource links), a plot is said to be there (no image, and
// no base64 in structuredContent either), and read_file of an image or
// a binary file says what it is instead of sending its bytes.
func TestDefaultResultIsText(t *testing.T) {
	cs, _ := connectContent(t, nil)
	res, out := call(t, cs, "execute_code", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.savefig('p.png')\n" +
		"open('data.csv', 'w').write('a,b\\n1,2\\n')\nopen('blob.bin', 'wb').write(bytes(range(256)) * 64)\nplt.show()"})
	if res.IsError {
		t.Fatalf("the plot: %s", text(res))
	}
	for _, c := range res.Content {
		if _, ok := c.(*sdk.TextContent); !ok {
			t.Errorf("a %T block in a default result", c)
		}
	}
	for _, want := range []string{"file created: /workspace/p.png", "file created: /workspace/data.csv", "display: [image/png", "not attached: this connection takes text only"} {
		if !strings.Contains(text(res), want) {
			t.Errorf("the text does not say %q: %s", want, text(res))
		}
	}
	structured, _ := json.Marshal(out)
	if bytes.Contains(structured, []byte("iVBORw0KGgo")) { // "\x89PNG\r\n\x1a\n" in base64
		t.Errorf("structuredContent carries the PNG: %d bytes", len(structured))
	}
	for p, want := range map[string]string{"p.png": "is an image (image/png", "blob.bin": "is a binary file", "data.csv": "a,b\n1,2\n"} {
		res, _ := call(t, cs, "read_file", map[string]any{"path": p})
		if len(res.Content) != 1 || !strings.Contains(text(res), want) || res.IsError {
			t.Errorf("read_file %s: %d blocks, %q", p, len(res.Content), text(res))
		}
	}
}

// /mcp?content= picks the blocks for an HTTP client; anything else in
// the query is refused, not ignored.
func TestContentQuery(t *testing.T) {
	srv := mcp.New(mcp.Options{Client: func(http.Header) *client.Client { return client.InProcess(http.NotFoundHandler()) }, Version: "test", Log: slog.New(slog.DiscardHandler)})
	h := srv.HTTPHandler(mcp.HTTPOptions{Idle: time.Minute, MaxQuiet: time.Minute})
	for q, want := range map[string]int{
		"?content=image":                      http.StatusOK,
		"?content=image,resource_link":        http.StatusOK,
		"?content=":                           http.StatusOK,
		"?content=images":                     http.StatusBadRequest,
		"?content=image&content=video":        http.StatusBadRequest,
		"?images=true":                        http.StatusBadRequest,
		"?content=resource&resource_links=on": http.StatusBadRequest,
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		req := httptest.NewRequest("POST", "http://127.0.0.1/mcp"+q, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("%s: %d %s, want %d", q, w.Code, w.Body, want)
		}
		if want == http.StatusBadRequest && !strings.Contains(w.Body.String(), "image, resource_link, resource") {
			t.Errorf("%s: %s does not say what /mcp takes", q, w.Body)
		}
	}
}
