package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"airlock/internal/docgen"
)

var update = flag.Bool("update", false, "rewrite docs/reference from the code")

// usages are the usage texts of every command, as -h prints them.
func usages(t *testing.T) []docgen.Command {
	out := []docgen.Command{{Name: "airlock", Usage: usage}}
	help := func(name string, run func(stderr io.Writer) int) {
		var stderr bytes.Buffer
		if code := run(&stderr); code != 0 {
			t.Fatalf("airlock %s -h: exit %d: %s", name, code, stderr.String())
		}
		out = append(out, docgen.Command{Name: "airlock " + name, Usage: stderr.String()})
	}
	h := []string{"-h"}
	help("run", func(e io.Writer) int { return runCmd(h, nil, io.Discard, e) })
	help("serve", func(e io.Writer) int { return serveCmd(h, e) })
	help("mcp", func(e io.Writer) int { return mcpCmd(h, e) })
	help("doctor", func(e io.Writer) int { return doctorCmd(h, io.Discard, e) })
	help("bench", func(e io.Writer) int { return benchCmd(h, io.Discard, e) })
	for _, sub := range []string{"create", "list", "revoke", "quota"} {
		help("keys "+sub, func(e io.Writer) int { return keysCmd([]string{sub, "-h"}, io.Discard, e) })
	}
	help("audit", func(e io.Writer) int { return auditCmd(h, io.Discard, e) })
	help("top", func(e io.Writer) int { return topCmd(h, io.Discard, e) })
	help("template", func(e io.Writer) int { return templateCmd([]string{"list", "-h"}, io.Discard, e) })
	for _, sub := range []string{"print", "env"} {
		help("config "+sub, func(e io.Writer) int { return configCmd([]string{sub, "-h"}, io.Discard, e) })
	}
	for _, c := range out {
		if name := strings.TrimPrefix(c.Name, "airlock "); c.Name != "airlock" && !strings.Contains(usage, "airlock "+strings.Fields(name)[0]) {
			t.Errorf("airlock's usage does not list %s", c.Name)
		}
	}
	return out
}

// The generated reference in docs/reference is what the code says now:
// configuration keys, errors, metrics, the HTTP API and the commands'
// flags; and the performance page's benchmark table is what the committed
// report (docs/explanation/bench.json) says against the bench's goals.
// After changing any of them, regenerate it (the message says how).
func TestReference(t *testing.T) {
	files, err := docgen.Files("../..", usages(t))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := docgen.Write("../..", files); err != nil {
			t.Fatal(err)
		}
		return
	}
	if stale := docgen.Stale("../..", files); len(stale) > 0 {
		t.Errorf("the generated reference or benchmark table is stale: %s\nrun `%s` and commit the result", strings.Join(stale, ", "), docgen.Regenerate)
	}
}
