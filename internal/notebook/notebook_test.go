package notebook

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/notebook/notebooktest"
)

// hostile is a history with every kind of entry and the outputs sandboxed
// code can make up.
func hostile() *apitype.History {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	exit := 0
	return &apitype.History{
		Session: "3f9c2a7d81b04e6f9a1c5d20", Language: apitype.Python, State: apitype.StateEnded, EndReason: "deleted", EndCode: apitype.EndDeleted,
		Entries: []apitype.HistoryEntry{
			{Seq: 1, Kind: apitype.HistoryExecution, ID: "e1", Code: "import matplotlib\nplt.plot([1,2])\n", StartedAt: t0, Result: &apitype.Result{
				Stdout: "line 1\nline 2\n", Stderr: "warn\n", ExecutionCount: 1, DurationMs: 12.5,
				Results: []apitype.Output{
					{Type: apitype.OutputDisplay, Data: map[string]json.RawMessage{"image/png": json.RawMessage(`"iVBORw0KGgo="`), "text/plain": json.RawMessage(`"<Figure>"`)}},
					{Type: apitype.OutputResult, Data: map[string]json.RawMessage{"text/html": json.RawMessage(`["<b>", "x</b>"]`), "application/json": json.RawMessage(`{"a": 12345678901234567890}`)}, Metadata: json.RawMessage(`{"isolated": true}`)},
					// Not MIME types, values of the wrong JSON type, a
					// metadata that is no object.
					{Type: apitype.OutputDisplay, Data: map[string]json.RawMessage{"<script>": json.RawMessage(`"x"`), "text/plain": json.RawMessage(`42`), "image/svg+xml": json.RawMessage(`{"svg": 1}`)}, Metadata: json.RawMessage(`[1]`)},
					{Type: apitype.OutputDisplay, Data: map[string]json.RawMessage{"not a type": json.RawMessage(`"x"`)}},
				},
				Error: &apitype.ExecError{Name: "", Value: "bad \xff utf-8", Traceback: nil},
			}},
			{Seq: 2, Kind: apitype.HistoryCommand, ID: "c1", Code: "ls -l", StartedAt: t0.Add(time.Second), Command: &apitype.CommandResult{
				ID: "c1", Command: "ls -l", State: apitype.CommandExited, ExitCode: &exit, Stdout: "a\nb", DurationMs: 3}},
			{Seq: 3, Kind: apitype.HistoryExecution, ID: "e2", Code: "", StartedAt: t0.Add(2 * time.Second), Running: true, Result: &apitype.Result{Stdout: "so far"}},
			{Seq: 4, Kind: apitype.HistoryExecution, ID: "e3/../<x>", Code: "while True: pass", StartedAt: t0.Add(3 * time.Second), Trimmed: true, Result: &apitype.Result{
				Killed: true, KillReason: apitype.KillTimeout, ExecutionCount: 3, SessionEnded: true, EndReason: "deleted",
				Error: &apitype.ExecError{Name: "TimeoutError", Value: "timeout", Traceback: []string{"TimeoutError: timeout"}}}},
		},
	}
}

// A history with every kind of output, and made-up ones, is a notebook
// nbformat accepts, with the outputs in place.
func TestNotebookValid(t *testing.T) {
	h := hostile()
	nb := From(h)
	data := nb.Marshal()
	notebooktest.Validate(t, data)
	var doc struct {
		Cells []map[string]any `json:"cells"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cells) != 4 {
		t.Fatalf("%d cells", len(doc.Cells))
	}
	first := doc.Cells[0]
	outs := first["outputs"].([]any)
	kinds := []string{}
	for _, o := range outs {
		kinds = append(kinds, o.(map[string]any)["output_type"].(string))
	}
	if strings.Join(kinds, ",") != "stream,stream,display_data,execute_result,display_data,error" {
		t.Errorf("outputs %v", kinds)
	}
	if !bytes.Contains(data, []byte(`12345678901234567890`)) {
		t.Error("application/json lost precision")
	}
	if first["execution_count"].(float64) != 1 {
		t.Errorf("execution count %v", first["execution_count"])
	}
	if c := doc.Cells[1]; c["cell_type"] != "code" || !strings.HasPrefix(c["source"].([]any)[0].(string), "%%bash") {
		t.Errorf("command cell %v", c)
	}
	if c := doc.Cells[2]; c["execution_count"] != nil {
		t.Errorf("a running cell has a count: %v", c["execution_count"])
	}
	meta := first["metadata"].(map[string]any)["airlock"].(map[string]any)
	if skipped, _ := meta["mime_skipped"].([]any); len(skipped) != 2 {
		t.Errorf("mime_skipped %v", meta["mime_skipped"])
	}
}

// Every language's commands: JavaScript's are raw cells.
func TestNotebookLanguages(t *testing.T) {
	var nbs [][]byte
	for _, lang := range []string{apitype.Python, apitype.Bash, apitype.JavaScript, "cobol"} {
		h := hostile()
		h.Language = lang
		nbs = append(nbs, From(h).Marshal())
	}
	notebooktest.Validate(t, nbs...)
}

// FuzzNotebook: whatever the outputs hold, the notebook is JSON whose
// cells have the keys of their type (nbformat itself checks the seeds in
// TestNotebookValid).
func FuzzNotebook(f *testing.F) {
	f.Add("text/plain", `"x"`, "code\n", "out")
	f.Add("<b>", `{"a":1}`, "\xff", "\x1b[31m")
	f.Add("application/vnd.x+json", `[1,2]`, "", "")
	f.Fuzz(func(t *testing.T, mime, value, code, out string) {
		if !json.Valid([]byte(value)) {
			return
		}
		h := &apitype.History{Session: "s", Language: apitype.Python, Entries: []apitype.HistoryEntry{{Seq: 1, Kind: apitype.HistoryExecution, ID: code, Code: code,
			Result: &apitype.Result{Stdout: out, Results: []apitype.Output{{Type: apitype.OutputResult, Data: map[string]json.RawMessage{mime: json.RawMessage(value)}}}}}}}
		data := From(h).Marshal()
		var doc struct {
			Cells []map[string]json.RawMessage `json:"cells"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		for _, c := range doc.Cells {
			for _, k := range []string{"id", "cell_type", "metadata", "source", "execution_count", "outputs"} {
				if _, ok := c[k]; !ok {
					t.Fatalf("cell without %s", k)
				}
			}
		}
	})
}
