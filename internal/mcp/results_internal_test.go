package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in      string
		n, drop int
	}{
		{"short", 100, 0},
		{strings.Repeat("a", 100), 100, 0},
		{strings.Repeat("a", 1000), 100, 948},
		{strings.Repeat("é", 5000), 200, 0}, // dropped: whatever keeps runes whole
		{"head" + strings.Repeat("-", 1<<20) + "tail", 8 << 10, 1<<20 + 8 - (8<<10 - 48)},
	} {
		got, dropped := clip(c.in, c.n)
		if len(got) > c.n || !utf8.ValidString(got) || c.drop != 0 && dropped != c.drop || len(c.in) > c.n && !strings.Contains(got, fmt.Sprintf("[... %d bytes left out ...]", dropped)) {
			t.Errorf("clip(%d bytes, %d): %d bytes, dropped %d (want %d)", len(c.in), c.n, len(got), dropped, c.drop)
		}
		if len(c.in) > c.n && (!strings.HasPrefix(c.in, got[:c.n/8]) || !strings.HasSuffix(c.in, got[len(got)-c.n/4:])) {
			t.Errorf("clip(%d bytes, %d) keeps neither end", len(c.in), c.n)
		}
	}
	tb := make([]string, 2000)
	for i := range tb {
		tb[i] = fmt.Sprintf("  File \"x.py\", line %d, in f", i)
	}
	tb = append(tb, "ZeroDivisionError: division by zero")
	got := clipLines(tb, 8<<10)
	if n := len(strings.Join(got, "\n")); n > 8<<10 || got[len(got)-1] != tb[len(tb)-1] || !strings.Contains(got[0], "bytes left out") {
		t.Errorf("clipLines: %d bytes, first %q, last %q", n, got[0], got[len(got)-1])
	}
	if got := clipLines([]string{strings.Repeat("x", 20000)}, 8<<10); len(strings.Join(got, "\n")) > 8<<10+64 {
		t.Errorf("clipLines of one long line: %d bytes", len(strings.Join(got, "\n")))
	}
}

// structuredContent carries what the text carries, under the same caps,
// and says what it left out: a megabyte of stdout is 8 KiB in both.
func TestExecuteResultCaps(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 30000)...)
	pngJSON, _ := json.Marshal(base64.StdEncoding.EncodeToString(png))
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	res := &apitype.Result{
		Stdout:          "first line\n" + strings.Repeat("o", 1<<20) + "\nlast line\n",
		Stderr:          strings.Repeat("e", 100<<10),
		StdoutTruncated: true, StdoutDroppedBytes: 5000,
		Error: &apitype.ExecError{Name: "ValueError", Value: strings.Repeat("v", 50<<10), Traceback: []string{strings.Repeat("t", 50<<10), "ValueError: ..."}},
	}
	for i := 0; i < 30; i++ {
		res.Results = append(res.Results, apitype.Output{Type: apitype.EventDisplay, Data: map[string]json.RawMessage{
			"image/png": pngJSON, "text/plain": str("<Figure>"), "text/html": str(strings.Repeat("<td>", 10000)),
		}})
	}
	res.Results = append(res.Results, apitype.Output{Type: apitype.EventResult, Data: map[string]json.RawMessage{"text/plain": str(strings.Repeat("r", 1<<20))}})
	for i := 0; i < 120; i++ {
		res.FilesChanged = append(res.FilesChanged, apitype.FileChange{Path: fmt.Sprintf("out/%d.csv", i), Size: 10, Change: "created"})
	}
	r, out := executeResult("s1", "", res, blocks{image: true, resourceLink: true})

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(out)
	structured := buf.Bytes()
	if len(structured) > 100<<10 {
		t.Errorf("structuredContent is %d bytes", len(structured))
	}
	if bytes.Contains(structured, pngJSON[1:100]) {
		t.Error("structuredContent carries the image's base64")
	}
	if len(out.Stdout) > fieldCap || len(out.Stderr) > fieldCap || len(out.Result) > fieldCap || len(out.Error.Value) > fieldCap ||
		len(strings.Join(out.Error.Traceback, "\n")) > fieldCap+64 {
		t.Errorf("fields over the cap: stdout %d, stderr %d, result %d, error %d, traceback %d", len(out.Stdout), len(out.Stderr), len(out.Result), len(out.Error.Value), len(strings.Join(out.Error.Traceback, "\n")))
	}
	if !strings.HasPrefix(out.Stdout, "first line\n") || !strings.HasSuffix(out.Stdout, "last line\n") ||
		out.StdoutDropped != 5000+len(res.Stdout)-len(out.Stdout)+len(fmt.Sprintf("\n[... %d bytes left out ...]\n", out.StdoutDropped-5000)) || out.StderrDropped == 0 {
		t.Errorf("stdout: dropped %d of %d, kept %q...", out.StdoutDropped, len(res.Stdout), out.Stdout[:40])
	}
	if !out.Truncated || len(out.Results) != maxResults || out.ResultsDropped != 31-maxResults || out.ImagesDropped != 30-maxImages ||
		len(out.Files) != maxFiles || out.FilesDropped != 120-maxFiles {
		t.Errorf("lists: results %d (+%d), images dropped %d, files %d (+%d), truncated %v", len(out.Results), out.ResultsDropped, out.ImagesDropped, len(out.Files), out.FilesDropped, out.Truncated)
	}
	text := 0
	for _, r := range out.Results {
		for _, v := range r {
			text += len(v.(string))
		}
	}
	if s, _ := out.Results[0]["text/html"].(string); len(s) > fieldCap || text > resultsCap+maxResults*200 {
		t.Errorf("an HTML output of %d bytes, %d bytes of results in all", len(s), text)
	}
	if s, _ := out.Results[maxResults-1]["text/html"].(string); !strings.Contains(s, "left out") || out.Results[maxResults-1]["text/plain"] != "<Figure>" {
		t.Errorf("the last output: %v", out.Results[maxResults-1])
	}
	if s, _ := out.Results[0]["image/png"].(string); !strings.Contains(s, "image/png, 30008 bytes") {
		t.Errorf("the image's place in results: %q", s)
	}

	summary := r.Content[0].(*mcp.TextContent).Text
	if len(summary) > 60<<10 {
		t.Errorf("the text is %d bytes", len(summary))
	}
	for _, want := range []string{
		fmt.Sprintf("%d bytes of stdout", out.StdoutDropped), "max_output dropped 5000", "and 70 or more changed files", "15 display outputs and 22 images were left out",
		"file created: /workspace/out/0.csv (10 bytes)", "error: ValueError",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the text does not say %q:\n%s", want, summary[len(summary)-2000:])
		}
	}
}

func TestCommandResultCaps(t *testing.T) {
	two := 2
	res := &apitype.CommandResult{Stdout: strings.Repeat("o", 1<<20), Stderr: "oops\n", ExitCode: &two}
	r, out := commandResult("s1", "", res)
	structured, _ := json.Marshal(out)
	text := r.Content[0].(*mcp.TextContent).Text
	if len(structured) > 10<<10 || len(text) > 10<<10 || !out.Truncated || out.StdoutDropped == 0 || out.StderrDropped != 0 ||
		!strings.Contains(text, fmt.Sprintf("%d bytes of stdout", out.StdoutDropped)) || !r.IsError {
		t.Errorf("structured %d bytes, text %d bytes, dropped %d: %s", len(structured), len(text), out.StdoutDropped, text[len(text)-300:])
	}
}
