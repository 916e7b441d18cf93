package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// Through a real sandbox: 900 KB of stdout reach the model as 8 KiB, in
// the text and in structuredContent alike, and both say how much was
// left out.
func TestLargeOutputCapped(t *testing.T) {
	cs, _ := connect(t)
	for _, c := range []struct{ tool, arg string }{
		{"execute_code", "print('begin'); print('x' * 900_000); print('end')"},
		{"run_command", "echo begin; head -c 900000 /dev/zero | tr '\\0' x; echo; echo end"},
	} {
		key := "code"
		if c.tool == "run_command" {
			key = "command"
		}
		res, out := call(t, cs, c.tool, map[string]any{key: c.arg})
		structured, _ := json.Marshal(res.StructuredContent)
		stdout, _ := out["stdout"].(string)
		dropped, _ := out["stdout_dropped"].(float64)
		if res.IsError || len(stdout) > 8<<10 || !strings.HasPrefix(stdout, "begin\n") || !strings.HasSuffix(stdout, "end\n") ||
			dropped < 890_000 || out["truncated"] != true || len(structured) > 12<<10 {
			t.Errorf("%s: stdout %d bytes, dropped %v, truncated %v, structuredContent %d bytes", c.tool, len(stdout), out["stdout_dropped"], out["truncated"], len(structured))
		}
		if txt := text(res); len(txt) > 10<<10 || !strings.Contains(txt, "bytes of stdout") {
			t.Errorf("%s: the text (%d bytes) does not say what was left out: %s", c.tool, len(txt), txt[len(txt)-400:])
		}
	}
}
