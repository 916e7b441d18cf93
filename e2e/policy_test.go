package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
)

// policyServer has output redaction (credentials and an operator rule)
// and code rules for every tenant but "open", whose own redaction is
// none.
func policyServer(t *testing.T) *server {
	return keysServer(t, map[string]any{
		"server": map[string]any{"token": "admin-token"},
		"redaction": map[string]any{
			"builtin": []string{"credentials"},
			"rules":   []map[string]string{{"name": "ticket", "pattern": `TICKET-[0-9]{1,8}`}},
		},
		"code_rules": []map[string]string{
			{"name": "no-subprocess", "language": "python", "pattern": `\bsubprocess\b`, "action": "deny", "message": "use the commands API"},
			{"name": "network", "pattern": `\brequests\b`, "action": "flag"},
		},
		"tenants": map[string]any{"open": map[string]any{"redaction": map[string]any{}}},
	})
}

const awsKey = "AKIAIOSFODNN7EXAMPLE"

// What goes back is redacted: stdout, stderr, text results, the error,
// streamed events (a key printed in two flushes too), commands, one-shot
// and program runs; the result counts the matches and the audit keeps the
// count, never the secret. A tenant with its own empty redaction gets the
// output as it is.
func TestOutputRedaction(t *testing.T) {
	s := policyServer(t)
	ctx := context.Background()
	keyR := s.newKey("team-r")
	c := s.as(keyR)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `import sys
print("key ` + awsKey + `")
print("password=hunter2", file=sys.stderr)
"see TICKET-42"`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "key [REDACTED:aws_access_key_id]\n" || res.Stderr != "password=[REDACTED:secret_pair]\n" ||
		len(res.Results) != 1 || string(res.Results[0].Data["text/plain"]) != `"'see [REDACTED:ticket]'"` || res.Redacted != 3 {
		t.Errorf("result %+v (results %s): want the key, password and ticket redacted, redacted 3", res, res.Results)
	}

	// A key printed in two pieces, flushed apart, streams redacted whole.
	var streamed strings.Builder
	var events int
	res, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `import sys, time
sys.stdout.write("` + awsKey[:8] + `"); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write("` + awsKey[8:] + ` and ghp_` + strings.Repeat("x", 36) + `\n"); sys.stdout.flush()
raise ValueError("token=abc123")`}, func(e apitype.Event) {
		if e.Type == apitype.EventStdout {
			streamed.WriteString(e.Text)
			events++
		}
		if e.Type == apitype.EventError && (strings.Contains(e.Error.Value, "abc123") || strings.Contains(strings.Join(e.Error.Traceback, ""), "abc123")) {
			t.Errorf("the error event carries the secret: %+v", e.Error)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[REDACTED:aws_access_key_id] and [REDACTED:github_token]\n"
	if streamed.String() != want || res.Stdout != want {
		t.Errorf("streamed %q (%d events), result %q; want %q", streamed.String(), events, res.Stdout, want)
	}
	if res.Error == nil || res.Error.Value != "token=[REDACTED:secret_pair]" || strings.Contains(strings.Join(res.Error.Traceback, ""), "abc123") || res.Redacted < 3 {
		t.Errorf("error %+v, redacted %d: want the token redacted in value and traceback", res.Error, res.Redacted)
	}

	cmd, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "echo " + awsKey + "; echo secret: s3 >&2"}, nil)
	if err != nil || cmd.Stdout != "[REDACTED:aws_access_key_id]\n" || cmd.Stderr != "secret: [REDACTED:secret_pair]\n" || cmd.Redacted != 2 {
		t.Errorf("command %+v %v: want both redacted", cmd, err)
	}
	once, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "bash", Code: "echo Bearer abcdefgh12345678"}, nil)
	if err != nil || once.Stdout != "Bearer [REDACTED:bearer_token]\n" || once.Redacted != 1 {
		t.Errorf("one-shot %+v %v", once.Result, err)
	}
	prog, err := c.RunProgram(ctx, apitype.ProgramRequest{Language: "python", Code: "print('TICKET-7')"}, nil)
	if err != nil || prog.Stdout != "[REDACTED:ticket]\n" || prog.Redacted != 1 {
		t.Errorf("program %+v %v", prog.Result, err)
	}

	// The audit has the count, not the secret.
	recs := s.waitAudit(keyR, url.Values{"kind": {apitype.AuditExecution}, "session": {sess.ID}}, 2)
	if len(recs) < 2 || recs[0].Redactions != 3 {
		t.Errorf("audit records %+v: want redactions 3 on the first", recs)
	}

	// Tenant "open" has its own redaction: none.
	open := s.as(s.newKey("open"))
	o, err := open.RunOnce(ctx, apitype.OneShotRequest{Language: "bash", Code: "echo " + awsKey}, nil)
	if err != nil || o.Stdout != awsKey+"\n" || o.Redacted != 0 {
		t.Errorf("tenant open: %+v %v, want the output as it is", o.Result, err)
	}
}

// Code rules: a deny rule refuses the code with 403 naming the rule (the
// session goes on, no jail is built for a one-shot run); a flag rule lets
// it run and names itself in the result and the audit log. Only the
// rules of the code's language apply.
func TestCodeRules(t *testing.T) {
	s := policyServer(t)
	ctx := context.Background()
	key := s.newKey("team-c")
	c := s.as(key)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "import subprocess"}, nil)
	e := wantError(t, "denied code", err, 403, "permission_denied")
	if !strings.Contains(e.Message, `"no-subprocess"`) || !strings.Contains(e.Message, "use the commands API") {
		t.Errorf("message %q: want the rule's name and message", e.Message)
	}
	_, err = c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Code: "import subprocess"}, nil)
	wantError(t, "denied one-shot", err, 403, "permission_denied")
	_, err = c.RunProgram(ctx, apitype.ProgramRequest{Language: "python", Code: "import subprocess"}, nil)
	wantError(t, "denied program", err, 403, "permission_denied")

	res, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: "requests = 1\nprint(requests)"}, nil)
	if err != nil || res.Stdout != "1\n" || !slices.Equal(res.Flags, []string{"network"}) {
		t.Errorf("flagged code: %+v %v, want it run with flags [network]", res, err)
	}
	// The python rule does not apply to shell commands; the flag rule
	// (every language) does.
	cmd, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "echo subprocess requests"}, nil)
	if err != nil || cmd.Stdout != "subprocess requests\n" || !slices.Equal(cmd.Flags, []string{"network"}) {
		t.Errorf("command: %+v %v", cmd, err)
	}
	// Not a boundary: the same import spelled at run time passes.
	res, err = c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: `m = __import__("sub" + "process"); print(m.__name__)`}, nil)
	if err != nil || res.Stdout != "subprocess\n" {
		t.Errorf("%+v %v", res, err)
	}

	recs := s.waitAudit(key, url.Values{"kind": {apitype.AuditExecution}, "session": {sess.ID}}, 3)
	var denied, flagged bool
	for _, r := range recs {
		if slices.Equal(r.CodeFlags, []string{"no-subprocess"}) && r.Error == "CodeRuleDenied" {
			denied = true
		}
		if slices.Equal(r.CodeFlags, []string{"network"}) {
			flagged = true
		}
	}
	if !denied || !flagged {
		t.Errorf("audit records %+v: want the denial and the flag recorded", recs)
	}
}

// Every field of a result or event that carries what sandboxed code
// produced goes through redaction: the error's name (a class the code
// defines), value and traceback, stdout and stderr, each rich output's
// types (text, HTML, Markdown, LaTeX, JSON, SVG, JavaScript, a vendor
// JSON type) and metadata, the names of files it wrote, in the result and
// in streamed events alike, in a command's output (foreground and
// background), in a one-shot run's files, and in the audit record (the
// error's name). Each field must show a redaction: a field that no
// longer carries the secret at all would make its row vacuous. (Review:
// error.name reached the result and the audit record as it was.)
func TestRedactionEveryField(t *testing.T) {
	s := policyServer(t)
	ctx := context.Background()
	key := s.newKey("team-f")
	c := s.as(key)
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	code := `import sys
k = "` + awsKey + `"
class ` + awsKey + `(Exception): pass
display({"text/plain": k, "text/html": "<b>" + k + "</b>", "text/markdown": "*" + k + "*", "text/latex": "$" + k + "$",
         "application/json": {"key": k, k: [1, k]}, "image/svg+xml": "<svg><text>" + k + "</text></svg>",
         "application/vnd.custom+json": {"k": k}, "application/javascript": "var k = '" + k + "'"},
        raw=True, metadata={"text/html": {"note": k}})
open(k + ".txt", "w").write("x")
print(k); print(k, file=sys.stderr)
raise ` + awsKey + `(k)`
	res, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var events []apitype.Event
	streamed, err := c.Execute(ctx, sess.ID, apitype.ExecuteRequest{Code: code}, func(e apitype.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	event := func(typ string) apitype.Event {
		for _, e := range events {
			if e.Type == typ {
				return e
			}
		}
		t.Errorf("no %s event", typ)
		return apitype.Event{}
	}
	output := func(r *apitype.Result) apitype.Output {
		if r == nil || len(r.Results) == 0 {
			t.Errorf("no rich output in %+v", r)
			return apitype.Output{}
		}
		return r.Results[0]
	}
	cmd, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "echo " + awsKey + "; echo " + awsKey + " >&2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bg, err := c.RunCommand(ctx, sess.ID, apitype.CommandRequest{Command: "echo " + awsKey + "; echo " + awsKey + " >&2", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bg, err = c.Command(ctx, sess.ID, bg.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	var onceEvents []apitype.Event
	once, err := c.RunOnce(ctx, apitype.OneShotRequest{Language: "python", Code: `open("` + awsKey + `.txt", "w").write("x")`},
		func(e apitype.Event) { onceEvents = append(onceEvents, e) })
	if err != nil {
		t.Fatal(err)
	}
	var onceEnd apitype.Event
	for _, e := range onceEvents {
		if e.Type == apitype.EventEnd {
			onceEnd = e
		}
	}
	recs := s.waitAudit(key, url.Values{"kind": {apitype.AuditExecution}, "session": {sess.ID}}, 2)
	if len(recs) < 2 {
		t.Fatalf("audit records %+v, want 2", recs)
	}

	for _, f := range []struct {
		name  string
		value any
	}{
		{"error.name", res.Error.Name},
		{"error.value", res.Error.Value},
		{"error.traceback", res.Error.Traceback},
		{"stdout", res.Stdout},
		{"stderr", res.Stderr},
		{"text/plain", output(res).Data["text/plain"]},
		{"text/html", output(res).Data["text/html"]},
		{"text/markdown", output(res).Data["text/markdown"]},
		{"text/latex", output(res).Data["text/latex"]},
		{"application/json", output(res).Data["application/json"]},
		{"image/svg+xml", output(res).Data["image/svg+xml"]},
		{"application/vnd.custom+json", output(res).Data["application/vnd.custom+json"]},
		{"application/javascript", output(res).Data["application/javascript"]},
		{"metadata", output(res).Metadata},
		{"files_changed", res.FilesChanged},
		{"streamed stdout", event(apitype.EventStdout).Text},
		{"streamed stderr", event(apitype.EventStderr).Text},
		{"streamed display", event(apitype.EventDisplay)},
		{"streamed error", event(apitype.EventError).Error},
		{"streamed end result", event(apitype.EventEnd).Result},
		{"streamed result", streamed},
		{"command stdout", cmd.Stdout},
		{"command stderr", cmd.Stderr},
		{"background command stdout", bg.Stdout},
		{"background command stderr", bg.Stderr},
		{"one-shot files_changed", once.FilesChanged},
		{"one-shot files", once.Files},
		{"one-shot streamed end files", onceEnd.Files},
		{"audit record error", recs[0].Error},
	} {
		b, _ := json.Marshal(f.value)
		if bytes.Contains(b, []byte(awsKey)) || !bytes.Contains(b, []byte("[REDACTED:aws_access_key_id]")) {
			t.Errorf("%s: %s; want the key redacted", f.name, truncate(string(b), 300))
		}
	}
	if len(once.Files) != 1 || once.Files[0].ContentBase64 != "eA==" {
		t.Errorf("one-shot files %+v: want the file's content under its redacted name", once.Files)
	}
	// The whole of what went back, for a field the table does not name.
	for what, v := range map[string]any{"result": res, "events": events, "one-shot": once, "audit": recs} {
		if b, _ := json.Marshal(v); bytes.Contains(b, []byte(awsKey)) {
			t.Errorf("%s carries the key: %s", what, truncate(string(b), 2000))
		}
	}
}
