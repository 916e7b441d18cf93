// Package notebook owns the export of a session's history as a Jupyter
// notebook (nbformat 4.5): every execution a code cell with its outputs
// (streams, execute_result and display_data with their MIME bundles,
// errors), every shell command a cell of its own, and airlock's facts
// (duration, kill reason, the session's end) in the cells' and the
// notebook's metadata.
//
// It must never emit a document the nbformat schema refuses, whatever the
// sandboxed code put in its outputs (a MIME type that is no MIME type, a
// bundle value of the wrong JSON type, text that is not UTF-8): what does
// not fit is converted to text or left out, and said so in the cell's
// metadata. It is pure: no I/O, fuzzable.
package notebook

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"airlock/internal/apitype"
)

// Notebook is an nbformat 4 notebook.
type Notebook struct {
	Cells         []Cell         `json:"cells"`
	Metadata      map[string]any `json:"metadata"`
	NBFormat      int            `json:"nbformat"`
	NBFormatMinor int            `json:"nbformat_minor"`
}

// Cell is a code or raw cell: exactly the keys its type has (a code
// cell's execution_count is null when it has none).
type Cell map[string]any

// Output is one output of a code cell, with exactly the keys of its
// output_type.
type Output map[string]any

func stream(name, text string) Output {
	return Output{"output_type": "stream", "name": name, "text": lines(text)}
}

// kernels are the kernelspec and language_info of each language.
var kernels = map[string][2]map[string]any{
	apitype.Python:     {{"name": "python3", "display_name": "Python 3", "language": "python"}, {"name": "python", "file_extension": ".py", "mimetype": "text/x-python"}},
	apitype.Bash:       {{"name": "bash", "display_name": "Bash", "language": "bash"}, {"name": "bash", "file_extension": ".sh", "mimetype": "text/x-sh"}},
	apitype.JavaScript: {{"name": "javascript", "display_name": "JavaScript (Node.js)", "language": "javascript"}, {"name": "javascript", "file_extension": ".js", "mimetype": "application/javascript"}},
}

// From converts a session's history.
func From(h *apitype.History) *Notebook {
	nb := &Notebook{Cells: []Cell{}, NBFormat: 4, NBFormatMinor: 5, Metadata: map[string]any{}}
	if k, ok := kernels[h.Language]; ok {
		nb.Metadata["kernelspec"], nb.Metadata["language_info"] = k[0], k[1]
	}
	meta := map[string]any{"session": h.Session, "language": h.Language, "state": h.State, "forgotten": h.Forgotten}
	if h.EndReason != "" {
		meta["end_reason"], meta["end_code"] = h.EndReason, string(h.EndCode)
	}
	if h.Tenant != "" {
		meta["tenant"] = h.Tenant
	}
	nb.Metadata["airlock"] = meta
	for i := range h.Entries {
		e := &h.Entries[i]
		switch {
		case e.Kind == apitype.HistoryCommand && e.Command != nil:
			nb.Cells = append(nb.Cells, commandCell(h.Language, e))
		case e.Result != nil:
			nb.Cells = append(nb.Cells, codeCell(e))
		}
	}
	return nb
}

// Marshal is the notebook as a file (.ipynb): indented JSON, as Jupyter
// writes it.
func (nb *Notebook) Marshal() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(nb); err != nil {
		// Every value is a string, number, bool, map or slice of them.
		panic("notebook: " + err.Error())
	}
	return buf.Bytes()
}

// cellID is a cell's id: the entry's kind and id, unique in a session
// ("e3", "c2"), made of what nbformat allows.
func cellID(e *apitype.HistoryEntry) string {
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, e.ID)
	if id == "" || len(id) > 60 {
		id = "seq-" + strconv.FormatInt(e.Seq, 10)
	}
	return id
}

// entryMeta is what airlock knows of an entry beyond its outputs, and
// JupyterLab's record of when it ran (metadata.execution).
func entryMeta(e *apitype.HistoryEntry, dur float64, extra map[string]any) map[string]any {
	m := map[string]any{"kind": e.Kind, "id": e.ID, "seq": e.Seq, "started_at": e.StartedAt.Format(time.RFC3339Nano), "duration_ms": dur}
	if e.Running {
		m["running"] = true
	}
	if e.Trimmed {
		m["trimmed"] = true
	}
	for k, v := range extra {
		m[k] = v
	}
	meta := map[string]any{"airlock": m}
	if !e.Running {
		end := e.StartedAt.Add(time.Duration(dur * float64(time.Millisecond)))
		meta["execution"] = map[string]any{
			"iopub.execute_input": e.StartedAt.Format(time.RFC3339Nano),
			"shell.execute_reply": end.Format(time.RFC3339Nano),
		}
	}
	return meta
}

func codeCell(e *apitype.HistoryEntry) Cell {
	res := e.Result
	extra := map[string]any{}
	if res.Killed {
		extra["killed"], extra["kill_reason"] = true, string(res.KillReason)
	}
	if res.SessionEnded {
		extra["session_ended"], extra["end_reason"] = true, res.EndReason
	}
	if res.StdoutTruncated || res.StderrTruncated {
		extra["output_truncated"] = true
	}
	if res.ResultsDropped > 0 {
		extra["results_dropped"] = res.ResultsDropped
	}
	if len(res.FilesChanged) > 0 {
		extra["files_changed"] = res.FilesChanged
	}
	if len(res.Egress) > 0 {
		extra["egress"] = res.Egress
	}
	var count any // null
	if !e.Running && res.ExecutionCount > 0 {
		count = res.ExecutionCount
	}
	outputs := []Output{}
	// Streams first, then rich outputs in order, then the error: what
	// the history keeps of an execution is in that order (stdout and
	// stderr are not interleaved with the rest).
	if res.Stdout != "" {
		outputs = append(outputs, stream("stdout", res.Stdout))
	}
	if res.Stderr != "" {
		outputs = append(outputs, stream("stderr", res.Stderr))
	}
	var skipped []string
	for _, o := range res.Results {
		data, skip := bundle(o.Data)
		skipped = append(skipped, skip...)
		if len(data) == 0 {
			continue
		}
		out := Output{"output_type": "display_data", "data": data, "metadata": outputMeta(o.Metadata)}
		if o.Type == apitype.OutputResult {
			out["output_type"], out["execution_count"] = "execute_result", count
		}
		outputs = append(outputs, out)
	}
	if len(skipped) > 0 {
		sort.Strings(skipped)
		extra["mime_skipped"] = skipped
	}
	if res.Error != nil {
		tb := res.Error.Traceback
		if tb == nil {
			tb = []string{}
		}
		outputs = append(outputs, Output{"output_type": "error", "ename": orDash(res.Error.Name), "evalue": res.Error.Value, "traceback": tb})
	}
	return Cell{"id": cellID(e), "cell_type": "code", "metadata": entryMeta(e, res.DurationMs, extra), "source": lines(e.Code),
		"execution_count": count, "outputs": outputs}
}

// commandCell is a shell command: a code cell that runs it again in the
// session's language where one can (IPython's %%bash, or bash itself),
// else a raw cell.
func commandCell(lang string, e *apitype.HistoryEntry) Cell {
	res := e.Command
	extra := map[string]any{"state": res.State}
	if res.ExitCode != nil {
		extra["exit_code"] = *res.ExitCode
	}
	if res.Killed {
		extra["killed"], extra["kill_reason"] = true, string(res.KillReason)
	}
	if res.Signal != "" {
		extra["signal"] = res.Signal
	}
	meta := entryMeta(e, res.DurationMs, extra)
	var src string
	switch lang {
	case apitype.Python:
		src = "%%bash\n" + e.Code
	case apitype.Bash:
		src = e.Code
	default:
		return Cell{"id": cellID(e), "cell_type": "raw", "metadata": meta, "source": lines("$ " + e.Code + "\n" + res.Stdout + res.Stderr)}
	}
	outputs := []Output{}
	if res.Stdout != "" {
		outputs = append(outputs, stream("stdout", res.Stdout))
	}
	if res.Stderr != "" {
		outputs = append(outputs, stream("stderr", res.Stderr))
	}
	return Cell{"id": cellID(e), "cell_type": "code", "metadata": meta, "source": lines(src), "execution_count": nil, "outputs": outputs}
}

// mimeType is what nbformat's schema takes as a bundle's key. Compiled
// on first use, as every package-level pattern of airlock's: this binary
// runs the initialisers of every package it links at every start.
var mimeType = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9]+/[a-zA-Z0-9\-\+\.]+$`) })

// jsonMIME are the types whose value is JSON of any kind; every other
// type's value is a string.
var jsonMIME = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^application/(.*\+)?json$`) })

// bundle converts a MIME bundle as the runtime sent it: JSON types keep
// their value, other types take a string (a string array joined, any
// other value as its JSON text); keys that are no MIME type are skipped
// and named.
func bundle(data map[string]json.RawMessage) (map[string]any, []string) {
	out := map[string]any{}
	var skipped []string
	for k, raw := range data {
		if !mimeType().MatchString(k) {
			skipped = append(skipped, strconv.QuoteToASCII(truncate(k, 64)))
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			skipped = append(skipped, k)
			continue
		}
		if jsonMIME().MatchString(k) {
			out[k] = raw // as it came (big numbers stay exact)
			continue
		}
		switch t := v.(type) {
		case string:
			out[k] = lines(t)
		case []any:
			var b strings.Builder
			for _, x := range t {
				if s, ok := x.(string); ok {
					b.WriteString(s)
				} else {
					j, _ := json.Marshal(x)
					b.Write(j)
				}
			}
			out[k] = lines(b.String())
		default:
			out[k] = lines(string(raw))
		}
	}
	return out, skipped
}

// outputMeta is an output's metadata: an object, or none.
func outputMeta(raw json.RawMessage) map[string]any {
	m := map[string]any{}
	if len(raw) > 0 {
		var v map[string]any
		if json.Unmarshal(raw, &v) == nil && v != nil {
			m = v
		}
	}
	return m
}

// lines splits text as Jupyter stores it: each line keeps its newline.
func lines(s string) []string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if s == "" {
		return []string{}
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
