package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// commandConfig declares command tools; marker makes their processes
// findable in /proc.
func commandConfig(t *testing.T, marker string) config.Config {
	c := testConfig(t, "http://127.0.0.1:9")
	cred := &config.Credential{Env: "TEST_TOOL_SECRET"}
	obj := json.RawMessage(`{"type":"object"}`)
	word := json.RawMessage(`{"type":"object","properties":{"word":{"type":"string","maxLength":64}}}`)
	c.Tools = map[string]config.Tool{
		"id":     {Arguments: obj, Command: &config.CommandTool{Argv: []string{"/usr/bin/id", "-u"}}},
		"env":    {Arguments: obj, Credential: cred, Command: &config.CommandTool{Argv: []string{"/usr/bin/env"}, Env: map[string]string{"MODE": "test"}}},
		"echo":   {Arguments: word, Command: &config.CommandTool{Argv: []string{"/bin/echo", "{word}"}}},
		"echo2":  {Arguments: word, Command: &config.CommandTool{Argv: []string{"/usr/bin/printf", "--", "%s\\n", "{word}"}}},
		"stdin":  {Arguments: word, Command: &config.CommandTool{Argv: []string{"/bin/cat"}, Stdin: "json"}},
		"sleep":  {Arguments: obj, Timeout: config.Duration(200 * time.Millisecond), Command: &config.CommandTool{Argv: []string{"/bin/sleep", marker}}},
		"yes":    {Arguments: obj, MaxResponse: 64 << 10, Command: &config.CommandTool{Argv: []string{"/usr/bin/yes", marker}}},
		"orphan": {Arguments: obj, Command: &config.CommandTool{Argv: []string{"/bin/sh", "-c", "(/bin/sleep " + marker + " &); echo started"}}},
		"fail":   {Arguments: obj, Credential: cred, Command: &config.CommandTool{Argv: []string{"/bin/sh", "-c", "echo \"token $AIRLOCK_CREDENTIAL\" >&2; exit 3"}}},
		"tail": {Arguments: obj, Credential: cred, Command: &config.CommandTool{Argv: []string{"/bin/sh", "-c",
			fmt.Sprintf("printf '%%s' \"$AIRLOCK_CREDENTIAL\" >&2; head -c %d /dev/zero | tr '\\0' b >&2", stderrTail+40-12)}}},
		"missing": {Arguments: obj, Command: &config.CommandTool{Argv: []string{"/nonexistent/tool"}}},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// processesWith counts the processes whose command line holds marker.
func processesWith(marker string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) {
			n++
		}
	}
	return n
}

func TestCommandTools(t *testing.T) {
	marker := fmt.Sprintf("%d.%d", 1000+os.Getpid()%1000, time.Now().UnixNano()%1000000)
	t.Setenv("TEST_TOOL_SECRET", testSecret)
	h := newHarness(t, commandConfig(t, marker))
	s := h.session("", "id", "env", "echo", "echo2", "stdin", "sleep", "yes", "orphan", "fail", "tail", "missing")

	res, ref, _ := call(t, s, "id", `{}`)
	if ref != nil {
		t.Fatal(ref)
	}
	want := fmt.Sprint(os.Geteuid())
	if os.Geteuid() == 0 {
		want = "65534" // broker.command_user
	}
	if res.Kind != apitype.ToolCommand || res.Status != 0 || strings.TrimSpace(string(res.JSON)) != want {
		t.Fatalf("id: %+v (json %s), want uid %s", res, res.JSON, want)
	}

	// A clean environment: the credential in its variable (scrubbed from
	// what comes back), the tool's own, nothing of the server's.
	t.Setenv("SERVER_ONLY", "x")
	res, ref, _ = call(t, s, "env", `{}`)
	if ref != nil || res.Text == nil {
		t.Fatal(ref, res)
	}
	env := *res.Text
	for _, want := range []string{"AIRLOCK_CREDENTIAL=" + redacted, "MODE=test", "PATH=/usr/local/bin:/usr/bin:/bin"} {
		if !strings.Contains(env, want) {
			t.Fatalf("env lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "SERVER_ONLY") || strings.Contains(env, "TEST_TOOL_SECRET") {
		t.Fatalf("the server's environment leaked into the command:\n%s", env)
	}

	// An argument is one argv element; one starting with "-" is refused
	// unless "--" came before it.
	if _, ref, _ = call(t, s, "echo", `{"word":"-n hello; rm -rf /"}`); ref == nil || ref.Field != "word" || ref.Rule != "leading_dash" {
		t.Fatalf("leading dash: %v", ref)
	}
	res, ref, _ = call(t, s, "echo2", `{"word":"-n hello; $(id)"}`)
	if ref != nil || res.Text == nil || *res.Text != "-n hello; $(id)\n" {
		t.Fatalf("echo2: %v %+v", ref, res)
	}
	res, ref, _ = call(t, s, "echo", `{}`) // a lone placeholder with no value is left out
	if ref != nil || res.Text == nil || *res.Text != "\n" {
		t.Fatalf("echo without word: %v %+v", ref, res)
	}
	res, ref, _ = call(t, s, "stdin", `{"word":"on stdin"}`)
	if ref != nil || string(res.JSON) != `{"word":"on stdin"}` {
		t.Fatalf("stdin: %v %+v", ref, res)
	}

	// A non-zero exit is an answer; stderr is its tail, scrubbed.
	res, ref, _ = call(t, s, "fail", `{}`)
	if ref != nil || res.Status != 3 || !strings.Contains(res.Stderr, "token "+redacted) {
		t.Fatalf("fail: %v %+v", ref, res)
	}
	// A credential cut at the start of the kept tail is dropped, not
	// shown in part.
	res, ref, _ = call(t, s, "tail", `{}`)
	if ref != nil || strings.Contains(res.Stderr, testSecret[len(testSecret)-12:]) || len(res.Stderr) > stderrTail {
		t.Fatalf("tail: %v, stderr of %d bytes ends the credential: %v", ref, len(res.Stderr), strings.Contains(res.Stderr, testSecret[len(testSecret)-12:]))
	}

	// A command that hangs, or writes without end, is stopped, with its
	// process group; so is what a finished one left behind.
	_, ref, rec := call(t, s, "sleep", `{}`)
	if !errors.Is(ref, errdefs.ErrTimeout) || rec.Decision != apitype.ToolFailed {
		t.Fatalf("sleep: %v", ref)
	}
	_, ref, _ = call(t, s, "yes", `{}`)
	if !errors.Is(ref, errdefs.ErrTooLarge) || ref.Rule != "max_response" {
		t.Fatalf("yes: %v", ref)
	}
	res, ref, _ = call(t, s, "orphan", `{}`)
	if ref != nil || res.Text == nil || *res.Text != "started\n" {
		t.Fatalf("orphan: %v %+v", ref, res)
	}
	// SIGKILL is sent to the group when the call ends; the kernel takes
	// a moment to remove what it killed.
	for deadline := time.Now().Add(30 * time.Second); processesWith(marker) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of command tools outlived their calls", processesWith(marker))
		}
	}

	// A command that cannot start says so, without the host's path.
	_, ref, _ = call(t, s, "missing", `{}`)
	if !errors.Is(ref, errdefs.ErrUnavailable) || strings.Contains(ref.Msg, "nonexistent") {
		t.Fatalf("missing: %v", ref)
	}
	h.noSecret(t, res)
}
