package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"airlock/internal/apitype"
	"airlock/internal/notebook/notebooktest"
)

// historyCode makes every kind of output a notebook holds: streams, a
// plot, a table, a result, and last an error.
var historyCode = []string{
	"print('hello'); import sys; print('warn', file=sys.stderr)",
	"import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
	"import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
	"1 / 0",
}

// A session's history over HTTP: every execution and command, the
// session's description of what it uses, polling with ETags, and the
// notebook export nbformat accepts, with the plot in it.
func TestHistoryAndNotebook(t *testing.T) {
	s := startServer(t, nil)
	ctx := context.Background()
	id := s.newSession("python", nil)
	for _, code := range historyCode {
		s.exec(id, code)
	}
	if _, err := s.c.RunCommand(ctx, id, apitype.CommandRequest{Command: "echo from-shell"}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := s.c.History(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 5 || h.State != apitype.StateIdle {
		t.Fatalf("history: %d entries, state %s", len(h.Entries), h.State)
	}
	plot := h.Entries[1].Result
	if len(plot.Results) == 0 || plot.Results[0].Data["image/png"] == nil {
		t.Errorf("the plot's entry has no image: %+v", plot.Results)
	}
	if e := h.Entries[3].Result.Error; e == nil || e.Name != "ZeroDivisionError" {
		t.Errorf("the error's entry: %+v", e)
	}
	if c := h.Entries[4]; c.Kind != apitype.HistoryCommand || c.Command.Stdout != "from-shell\n" {
		t.Errorf("the command's entry: %+v", c)
	}

	// ETags: 304 while nothing changed, 200 once something did.
	code, _, hdr := s.rawHeader("GET", "/v1/sessions/"+id+"/history?after=5", nil)
	tag := hdr.Get("ETag")
	if code != 200 || tag == "" || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("history: %d, ETag %q, Cache-Control %q", code, tag, hdr.Get("Cache-Control"))
	}
	if code, _, _ := s.rawHeader("GET", "/v1/sessions/"+id+"/history?after=5", map[string]string{"If-None-Match": tag}); code != http.StatusNotModified {
		t.Errorf("unchanged history: %d, want 304", code)
	}
	s.exec(id, "x = 1")
	code, body, _ := s.rawHeader("GET", "/v1/sessions/"+id+"/history?after=5", map[string]string{"If-None-Match": tag})
	var newer apitype.History
	if code != 200 || json.Unmarshal(body, &newer) != nil || len(newer.Entries) != 1 || newer.Entries[0].Seq != 6 {
		t.Errorf("after a new execution: %d %s", code, truncate(string(body), 300))
	}

	info, err := s.c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.Usage == nil || info.Usage.MemoryBytes <= 0 || info.Usage.CPUMs <= 0 || info.History == nil {
		t.Errorf("description: usage %+v, history %+v", info.Usage, info.History)
	}

	nb, err := s.c.Notebook(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	notebooktest.Validate(t, nb)
	if !strings.Contains(string(nb), `"image/png"`) || !strings.Contains(string(nb), `"ename": "ZeroDivisionError"`) || !strings.Contains(string(nb), "%%bash") {
		t.Errorf("the notebook lacks the plot, the error or the command:\n%s", truncate(string(nb), 2000))
	}
	_, _, hdr = s.rawHeader("GET", "/v1/sessions/"+id+"/notebook", nil)
	if cd := hdr.Get("Content-Disposition"); cd != `attachment; filename="airlock-`+id+`.ipynb"` {
		t.Errorf("Content-Disposition %q", cd)
	}

	// Once ended, its history is still there, saying how it ended.
	if err := s.c.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	if h, err := s.c.History(ctx, id, 0); err != nil || h.State != apitype.StateEnded || h.EndCode != apitype.EndDeleted || len(h.Entries) != 6 {
		t.Errorf("the ended session's history: %+v, %v", h, err)
	}
}

// rawHeader is raw with the response's headers.
func (s *server) rawHeader(method, path string, hdr map[string]string) (int, []byte, http.Header) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.URL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	_, err = io.Copy(&buf, resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, []byte(buf.String()), resp.Header
}
