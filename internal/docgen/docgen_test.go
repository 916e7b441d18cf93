package docgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"airlock/internal/config"
)

// The reference's whole-file block is a configuration that loads, and
// what it loads is the defaults.
func TestDefaultsBlockIsTheDefaults(t *testing.T) {
	doc, err := Configuration("../..")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(doc, "```json\n")
	block, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("no JSON block in the configuration reference")
	}
	path := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := config.Build(config.Sources{File: path})
	if err != nil {
		t.Fatalf("the reference's defaults do not load: %v\n%s", err, block)
	}
	want := config.Default()
	want.Version = 1 // the block says it
	if a, b := jsonOf(t, got), jsonOf(t, want); a != b {
		t.Errorf("the reference's defaults load as\n%s\nnot the defaults\n%s", a, b)
	}
}

// jsonOf is c as JSON, empty lists and maps counted as absent.
func jsonOf(t *testing.T, c config.Config) string {
	var m map[string]any
	b, _ := json.Marshal(c)
	json.Unmarshal(b, &m)
	var prune func(v any) any
	prune = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				e = prune(e)
				if e == nil {
					delete(x, k)
				} else {
					x[k] = e
				}
			}
			if len(x) == 0 {
				return nil
			}
		case []any:
			if len(x) == 0 {
				return nil
			}
		}
		return v
	}
	out, _ := json.MarshalIndent(prune(m), "", " ")
	return string(out)
}

func TestRename(t *testing.T) {
	names := map[string]string{"MaxAge": "`max_age`", "Size": "`size`"}
	for in, want := range map[string]string{
		"MaxAge and MaxSize bound the log": "`max_age` and MaxSize bound the log",
		"see pool.Size, not `Size`":        "see pool.Size, not `Size`",
		"Size: a Size.":                    "`size`: a `size`.",
	} {
		if got := rename(in, names); got != want {
			t.Errorf("rename(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"a | b":                    `a \| b`,
		"<state_dir>/x, `<kept>`":  "&lt;state_dir>/x, `<kept>`",
		"*.suffix [REDACTED:name]": `\*.suffix \[REDACTED:name\]`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}

// A configuration field without a comment stops the generator, naming it.
func TestUndocumentedKeyIsRefused(t *testing.T) {
	src, err := parseSource("../config")
	if err != nil {
		t.Fatal(err)
	}
	if src.fields["Server"]["Listen"] == "" {
		t.Fatal("Server.Listen has no comment in the source")
	}
	g := &cfgGen{srcs: map[string]*source{"airlock/internal/config": {types: src.types}}}
	g.walk(reflectConfigServer(), reflectValueNone(), "server.", new([]row))
	if len(g.missing) == 0 || g.missing[0] != "Server.Listen" {
		t.Errorf("missing = %v, want Server.Listen first", g.missing)
	}
}

func reflectConfigServer() reflect.Type { return reflect.TypeFor[config.Server]() }
func reflectValueNone() reflect.Value   { return reflect.Value{} }
