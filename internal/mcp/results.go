package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"airlock/internal/apitype"
)

// Caps on what a tool result carries. A model reads all of it, and some
// converters hand it structuredContent too (LangChain's adapters put a
// text result's structuredContent into the tool message): the text and
// structuredContent carry the same capped fields.
const (
	fieldCap   = 8 << 10  // stdout, stderr, the result, the traceback, each text output
	resultsCap = 32 << 10 // the text of all display outputs together
	maxImages  = 8        // image blocks per result
	maxResults = 16       // display outputs in structuredContent
	maxFiles   = 50       // changed files listed
	maxEntries = 500      // list_files entries
)

// clip caps s at n bytes: its first quarter and its last three quarters
// (cut on rune boundaries) around a line that says how many bytes were
// left out; dropped is that number.
func clip(s string, n int) (clipped string, dropped int) {
	if len(s) <= n {
		return s, 0
	}
	keep := max(0, n-48) // room for the line
	head := keep / 4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	rest := len(s) - (keep - head)
	for rest < len(s) && !utf8.RuneStart(s[rest]) {
		rest++
	}
	dropped = rest - head
	return s[:head] + fmt.Sprintf("\n[... %d bytes left out ...]\n", dropped) + s[rest:], dropped
}

// clipLines caps lines (a traceback) at n bytes in all, keeping the last
// ones, which name the error.
func clipLines(lines []string, n int) []string {
	n -= 48 // room for the line that says what was left out
	total := 0
	for i := len(lines) - 1; i >= 0; i-- {
		total += len(lines[i]) + 1
		if total > n {
			dropped := 0
			for _, l := range lines[:i+1] {
				dropped += len(l) + 1
			}
			kept := lines[i+1:]
			if len(kept) == 0 { // one line over the cap
				last, d := clip(lines[len(lines)-1], n)
				return []string{fmt.Sprintf("[... %d bytes left out ...]", dropped-len(lines[len(lines)-1])-1+d), last}
			}
			return append([]string{fmt.Sprintf("[... %d bytes left out ...]", dropped)}, kept...)
		}
	}
	return lines
}

// textual reports whether a display output of type mime is text (capped
// in structuredContent), not base64 of binary data.
func textual(mime string) bool {
	return strings.HasPrefix(mime, "text/") || mime == "image/svg+xml" ||
		mime == "application/json" || strings.HasSuffix(mime, "+json") || mime == "application/javascript"
}

// bundle is a display output's mime bundle as structuredContent carries
// it: text capped (each at fieldCap, and all the results' text at what is
// left of budget), binary data replaced by a line that says what it was
// and where it went (an image block, or nowhere).
func bundle(data map[string]json.RawMessage, imageAttached bool, why string, budget *int) map[string]any {
	b := map[string]any{}
	mimes := make([]string, 0, len(data))
	for mime := range data {
		mimes = append(mimes, mime)
	}
	sort.Strings(mimes) // text/plain before text/html: a model reads the former
	sort.SliceStable(mimes, func(i, j int) bool { return mimes[i] == "text/plain" })
	for _, mime := range mimes {
		raw := data[mime]
		var s string
		isString := json.Unmarshal(raw, &s) == nil
		switch {
		case mime == "text/plain" && isString:
			// What a model reads: at least its start, whatever the budget.
			b[mime], _ = clip(s, min(fieldCap, max(1<<10, *budget)))
			*budget -= len(b[mime].(string))
		case textual(mime) && isString && *budget >= 256:
			b[mime], _ = clip(s, min(fieldCap, *budget))
			*budget -= len(b[mime].(string))
		case textual(mime) && !isString && len(raw) <= min(fieldCap, *budget):
			var v any
			json.Unmarshal(raw, &v)
			b[mime] = v
			*budget -= len(raw)
		case textual(mime):
			b[mime] = fmt.Sprintf("[%s, %d bytes: left out, over the caps of MCP results (%d bytes each, %d in all)]", mime, len(raw), fieldCap, resultsCap)
		case imageAttached && isImage(mime):
			b[mime] = fmt.Sprintf("[%s, %d bytes: attached as an image block]", mime, b64Len(s))
		case isImage(mime):
			b[mime] = fmt.Sprintf("[%s, %d bytes: %s]", mime, b64Len(s), why)
		default:
			b[mime] = fmt.Sprintf("[%s, %d bytes: not attached]", mime, b64Len(s))
		}
	}
	return b
}

// b64Len is the length of the data s encodes in base64.
func b64Len(s string) int {
	return len(s)/4*3 - strings.Count(s[max(0, len(s)-2):], "=")
}

// isImage reports whether mime is an image a model can be shown.
func isImage(mime string) bool {
	return mime == "image/png" || mime == "image/jpeg" || mime == "image/gif" || mime == "image/webp"
}

// imageOf is a display output's image, if it has one.
func imageOf(data map[string]json.RawMessage) *mcp.ImageContent {
	for _, mime := range []string{"image/png", "image/jpeg", "image/gif", "image/webp"} {
		var b64 string
		if raw, ok := data[mime]; ok && json.Unmarshal(raw, &b64) == nil {
			if img, err := base64.StdEncoding.DecodeString(b64); err == nil {
				return &mcp.ImageContent{Data: img, MIMEType: mime}
			}
		}
	}
	return nil
}

// executeResult is what execute_code returns of res, run in session id,
// with the blocks bl besides text.
func executeResult(id, note string, res *apitype.Result, bl blocks) (*mcp.CallToolResult, ExecuteOut) {
	out := ExecuteOut{SessionID: id, Note: note, Results: []map[string]any{}, Files: []FileOut{}}
	out.Stdout, out.StdoutDropped = clip(res.Stdout, fieldCap)
	out.Stderr, out.StderrDropped = clip(res.Stderr, fieldCap)
	out.StdoutDropped += int(res.StdoutDroppedBytes)
	out.StderrDropped += int(res.StderrDroppedBytes)
	out.DurationMs, out.KillReason, out.ExecutionCount = res.DurationMs, string(res.KillReason), res.ExecutionCount
	out.ExitCode = res.ExitCode
	out.SessionEnded, out.EndReason = res.SessionEnded, res.EndReason
	var images []mcp.Content
	budget := resultsCap
	for _, o := range res.Results {
		img := imageOf(o.Data)
		attached := img != nil && bl.image && len(images) < maxImages
		if attached {
			images = append(images, img)
		} else if img != nil && bl.image {
			out.ImagesDropped++
		}
		if o.Type == apitype.EventResult {
			var text string
			json.Unmarshal(o.Data["text/plain"], &text)
			out.Result, _ = clip(text, fieldCap)
		}
		if len(out.Results) < maxResults {
			out.Results = append(out.Results, bundle(o.Data, attached, notAttached(bl), &budget))
		} else {
			out.ResultsDropped++
		}
	}
	out.ResultsDropped += res.ResultsDropped
	if res.Error != nil {
		out.Error = &ErrorOut{Name: res.Error.Name, Value: res.Error.Value, Traceback: clipLines(res.Error.Traceback, fieldCap)}
		out.Error.Value, _ = clip(out.Error.Value, fieldCap)
	}
	var links []mcp.Content
	for _, f := range res.FilesChanged {
		if len(out.Files) == maxFiles {
			out.FilesDropped++
			continue
		}
		fo := FileOut{Path: f.Path, Size: f.Size, Change: f.Change}
		if f.Change != "deleted" {
			fo.URI = fileURI(id, f.Path)
			size := f.Size
			if bl.resourceLink {
				links = append(links, &mcp.ResourceLink{URI: fo.URI, Name: path.Base(f.Path), Title: f.Path, MIMEType: mimeOf(f.Path), Size: &size})
			}
		}
		out.Files = append(out.Files, fo)
	}
	for _, c := range res.ToolCalls {
		if len(out.ToolCalls) == maxToolCalls {
			out.ToolCallsDropped++
			continue
		}
		reason, _ := clip(c.Reason, 300)
		out.ToolCalls = append(out.ToolCalls, ToolCallOut{Tool: c.Tool, Decision: c.Decision, Code: c.Code, Reason: reason, Field: c.Field, Rule: c.Rule, Status: c.Status})
	}
	out.ToolCallsDropped += res.ToolCallsDropped
	out.Truncated = res.StdoutTruncated || res.StderrTruncated || out.StdoutDropped > 0 || out.StderrDropped > 0 ||
		out.ResultsDropped > 0 || out.ImagesDropped > 0 || out.FilesDropped > 0 || res.FilesTruncated
	content := []mcp.Content{&mcp.TextContent{Text: summary(out, res)}}
	content = append(content, images...)
	content = append(content, links...)
	// A bash block's non-zero status is a failure like an exception.
	return &mcp.CallToolResult{Content: content, IsError: out.Error != nil || res.Killed || res.SessionEnded || res.ExitCode != 0}, out
}

// summary is what a model reads of an execution.
func summary(o ExecuteOut, res *apitype.Result) string {
	var b strings.Builder
	if o.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", o.Note)
	}
	if o.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s\n", strings.TrimRight(o.Stdout, "\n"))
	}
	if o.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s\n", strings.TrimRight(o.Stderr, "\n"))
	}
	if o.Result != "" {
		fmt.Fprintf(&b, "result:\n%s\n", o.Result)
	}
	for _, r := range o.Results {
		for mime, v := range r {
			if s, ok := v.(string); ok && isImage(mime) {
				fmt.Fprintf(&b, "display: %s\n", s)
			}
		}
		if _, ok := r["text/html"]; ok && r["text/plain"] == nil {
			b.WriteString("display: [an HTML output, in structuredContent.results]\n")
		}
	}
	if o.Error != nil {
		fmt.Fprintf(&b, "error: %s: %s\n", o.Error.Name, o.Error.Value)
		if len(o.Error.Traceback) > 0 {
			fmt.Fprintf(&b, "traceback:\n%s\n", strings.Join(o.Error.Traceback, "\n"))
		}
	}
	if o.KillReason != "" {
		fmt.Fprintf(&b, "killed: %s\n", o.KillReason)
	}
	if o.ExitCode != 0 {
		fmt.Fprintf(&b, "exit code %d\n", o.ExitCode)
	}
	if o.SessionEnded {
		fmt.Fprintf(&b, "the session ended: %s\n", o.EndReason)
	}
	for _, f := range o.Files {
		fmt.Fprintf(&b, "file %s: /workspace/%s (%d bytes)\n", f.Change, f.Path, f.Size)
	}
	if o.FilesDropped > 0 || res.FilesTruncated {
		fmt.Fprintf(&b, "(and %d or more changed files: list_files shows them)\n", max(o.FilesDropped, 1))
	}
	for _, c := range o.ToolCalls {
		switch {
		case c.Decision == apitype.ToolOK && c.Status != nil:
			fmt.Fprintf(&b, "tool call %s: ok, status %d\n", c.Tool, *c.Status)
		case c.Field != "":
			fmt.Fprintf(&b, "tool call %s: %s (%s), argument %s: %s\n", c.Tool, c.Decision, c.Rule, c.Field, c.Reason)
		default:
			fmt.Fprintf(&b, "tool call %s: %s: %s\n", c.Tool, c.Decision, c.Reason)
		}
	}
	if o.ToolCallsDropped > 0 {
		fmt.Fprintf(&b, "(and %d more tool calls: the audit log has them)\n", o.ToolCallsDropped)
	}
	truncation(&b, o.StdoutDropped, o.StderrDropped, res.StdoutDroppedBytes, res.StderrDroppedBytes, res.StdoutTruncated || res.StderrTruncated)
	if o.ResultsDropped > 0 || o.ImagesDropped > 0 {
		fmt.Fprintf(&b, "(%d display outputs and %d images were left out: at most %d and %d per result)\n", o.ResultsDropped, o.ImagesDropped, maxResults, maxImages)
	}
	if b.Len() == 0 {
		b.WriteString("(no output)\n")
	}
	fmt.Fprintf(&b, "[session %s, execution %d, %.0f ms]", o.SessionID, o.ExecutionCount, o.DurationMs)
	return b.String()
}

// truncation says how much of stdout and stderr was left out (all of it,
// stdout and stderr, and of that what the session's max_output dropped).
func truncation(b *strings.Builder, stdout, stderr int, pastMax, stderrPastMax int64, overMax bool) {
	if stdout == 0 && stderr == 0 && !overMax {
		return
	}
	fmt.Fprintf(b, "(%d bytes of stdout and %d of stderr were left out: MCP results carry at most %d bytes of each stream, "+
		"its start and end", stdout, stderr, fieldCap)
	if overMax {
		fmt.Fprintf(b, "; the session's max_output dropped %d and %d of them while the code ran on", pastMax, stderrPastMax)
	}
	b.WriteString(". Write long output to a file and read it in parts with run_command.)\n")
}

// commandResult is what run_command returns of res, run in session id.
func commandResult(id, note string, res *apitype.CommandResult) (*mcp.CallToolResult, CommandOut) {
	out := CommandOut{SessionID: id, Note: note}
	if res.ExitCode != nil { // a foreground command has ended
		out.ExitCode = *res.ExitCode
	}
	out.Stdout, out.StdoutDropped = clip(res.Stdout, fieldCap)
	out.Stderr, out.StderrDropped = clip(res.Stderr, fieldCap)
	out.StdoutDropped += int(res.StdoutDroppedBytes)
	out.StderrDropped += int(res.StderrDroppedBytes)
	out.Truncated = res.StdoutTruncated || res.StderrTruncated || out.StdoutDropped > 0 || out.StderrDropped > 0
	out.DurationMs, out.Killed, out.KillReason = res.DurationMs, res.Killed, string(res.KillReason)
	var b strings.Builder
	if note != "" {
		fmt.Fprintf(&b, "note: %s\n", note)
	}
	if out.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s\n", strings.TrimRight(out.Stdout, "\n"))
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s\n", strings.TrimRight(out.Stderr, "\n"))
	}
	if res.Killed {
		fmt.Fprintf(&b, "killed: %s\n", res.KillReason)
	}
	truncation(&b, out.StdoutDropped, out.StderrDropped, res.StdoutDroppedBytes, res.StderrDroppedBytes, res.StdoutTruncated || res.StderrTruncated)
	fmt.Fprintf(&b, "exit code %d [session %s, %.0f ms]", out.ExitCode, id, res.DurationMs)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, IsError: out.ExitCode != 0 || res.Killed}, out
}
