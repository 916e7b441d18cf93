package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
	"airlock/internal/client"
)

// An install runs in its session like code (a real server refuses one
// while code runs): install_packages takes its turn behind a running
// execute_code instead of overlapping it. The API is a fake that records
// an overlap.
func TestInstallTakesItsTurn(t *testing.T) {
	var mu sync.Mutex
	executing, overlapped := false, false
	entered, release := make(chan struct{}), make(chan struct{})
	looked, installed := make(chan struct{}, 8), make(chan struct{}, 1)
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		reply(w, apitype.Session{ID: "s1", Language: "python", State: apitype.StateIdle})
	})
	mux.HandleFunc("GET /v1/sessions/s1", func(w http.ResponseWriter, r *http.Request) {
		looked <- struct{}{}
		reply(w, apitype.Session{ID: "s1", Language: "python", State: apitype.StateBusy})
	})
	mux.HandleFunc("POST /v1/sessions/s1/execute", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		executing = true
		mu.Unlock()
		close(entered)
		<-release
		mu.Lock()
		executing = false
		mu.Unlock()
		reply(w, apitype.Result{Results: []apitype.Output{}, FilesChanged: []apitype.FileChange{}})
	})
	mux.HandleFunc("POST /v1/sessions/s1/packages", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		overlapped = overlapped || executing
		mu.Unlock()
		installed <- struct{}{}
		reply(w, apitype.PackagesResult{Installed: []apitype.Package{}})
	})
	cs := connectWith(t, client.InProcess(mux), []string{"pip"})

	done := make(chan *sdk.CallToolResult, 2)
	callAsync := func(tool string, args map[string]any) {
		go func() {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				res = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: err.Error()}}}
			}
			done <- res
		}()
	}
	callAsync("execute_code", map[string]any{"code": "long()"})
	<-entered
	callAsync("install_packages", map[string]any{"packages": []string{"rich"}, "manager": "pip"})
	<-looked // the install found the default session; it is at its turn now
	select {
	case <-installed: // overlapped: the check below says so
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for range 2 {
		if res := <-done; res.IsError {
			t.Errorf("a call failed: %s", text(res))
		}
	}
	if overlapped {
		t.Error("install_packages ran while execute_code was running in the same session")
	}
}
