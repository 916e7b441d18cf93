package e2b

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/httpapi"
)

// executeRequest is the code interpreter's POST /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// mimeKeys are the code interpreter's names of a result's formats.
var mimeKeys = map[string]string{
	"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
	"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
	"application/json": "json", "application/javascript": "javascript",
}

// line is one NDJSON line of an execution, E2B's shape.
type line map[string]any

// execute runs code in the sandbox's session and streams its output as
// E2B's code interpreter does: one JSON object per line, flushed per
// line, never a blank one.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	sess, _ := sessionOf(r)
	var req executeRequest
	if err := s.decode(w, r, &req); err != nil {
		failControl(w, err)
		return
	}
	er, err := executeOf(req)
	if err != nil {
		failControl(w, err)
		return
	}
	st := httpapi.NewStream(w, "application/x-ndjson")
	defer st.Finish() // its writer must not outlive the handler
	send := func(l line) {
		if b, err := httpapi.EncodeJSON(l); err == nil {
			st.Send(b)
		}
	}
	sawError := false
	emit := func(ev apitype.Event) {
		now := time.Now().UnixNano()
		switch ev.Type {
		case apitype.EventStdout, apitype.EventStderr:
			send(line{"type": ev.Type, "text": ev.Text, "timestamp": now})
		case apitype.EventTruncated:
			send(line{"type": "stderr", "text": "[airlock: " + ev.Stream + " reached max_output; more of it is dropped]\n", "timestamp": now})
		case apitype.EventResult, apitype.EventDisplay:
			out := line{"type": "result", "is_main_result": ev.Type == apitype.EventResult}
			for mt, raw := range ev.Data {
				key, ok := mimeKeys[mt]
				if !ok {
					key = mt
				}
				var v any
				if json.Unmarshal(raw, &v) == nil {
					out[key] = v
				}
			}
			send(out)
		case apitype.EventError:
			sawError = true
			send(errorLine(ev.Error))
		case apitype.EventEnd:
			if res := ev.Result; res != nil {
				if res.Error != nil && !sawError {
					sawError = true
					send(errorLine(res.Error))
				}
				send(line{"type": "number_of_executions", "execution_count": res.ExecutionCount})
			}
			send(line{"type": "end_of_execution"})
		}
	}
	_, err = sess.Execute(r.Context(), er, emit)
	if err == nil {
		return
	}
	if !st.Started() {
		st.Finish()
		failControl(w, err)
		return
	}
	// Failed after it started: the SDK raises what an error line says.
	send(line{"type": "error", "name": errdefs.Code(err), "value": errdefs.Message(err), "traceback": ""})
	send(line{"type": "end_of_execution"})
}

func errorLine(e *apitype.ExecError) line {
	return line{"type": "error", "name": e.Name, "value": e.Value, "traceback": strings.Join(e.Traceback, "\n")}
}
