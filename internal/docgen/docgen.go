// Package docgen owns the generated reference in docs/reference: it
// renders the configuration (from config's struct, its defaults and its
// field comments), the errors (from errdefs' table), the metrics (from
// the collectors), the HTTP API (from the OpenAPI document) and the
// command line (from each command's usage) as Markdown, and the
// performance page's benchmark table (from the committed report of one
// `airlock bench --json` run, against bench's goals), and says which
// committed files are stale. cmd/airlock's TestReference runs it.
//
// It must never be imported by the server or a command: it reads Go
// source, which only a checkout has.
package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Dir is where the reference lives, relative to the repository's root.
const Dir = "docs/reference"

// Regenerate is the command that rewrites the reference.
const Regenerate = "go test ./cmd/airlock -run TestReference -update"

// header starts every generated file.
func header(title, source string) string {
	return fmt.Sprintf("<!-- Generated from %s by internal/docgen: do not edit; run `%s`. -->\n\n# %s\n\n", source, Regenerate, title)
}

// Command is one command's usage text, as its -h prints it.
type Command struct {
	Name, Usage string
}

// Files renders every reference file, by path relative to root (the
// repository's root, whose source it reads).
func Files(root string, commands []Command) (map[string][]byte, error) {
	cfg, err := Configuration(root)
	if err != nil {
		return nil, err
	}
	errs, err := Errors(filepath.Join(root, "internal", "errdefs"))
	if err != nil {
		return nil, err
	}
	api, err := HTTPAPI(filepath.Join(root, "internal", "httpapi", "v1", "openapi.json"))
	if err != nil {
		return nil, err
	}
	perf, err := Performance(root)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		PerformancePage:           perf,
		Dir + "/configuration.md": []byte(cfg),
		Dir + "/errors.md":        []byte(errs),
		Dir + "/metrics.md":       []byte(Metrics()),
		Dir + "/http-api.md":      []byte(api),
		Dir + "/cli.md":           []byte(CLI(commands)),
	}, nil
}

// Stale lists the files under root whose content differs from files, and
// the generated-looking files in Dir that files does not have.
func Stale(root string, files map[string][]byte) []string {
	var out []string
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, want) {
			out = append(out, name)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, Dir))
	for _, e := range entries {
		name := Dir + "/" + e.Name()
		if _, ok := files[name]; ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, name))
		if err == nil && bytes.Contains(b, []byte("by internal/docgen")) {
			out = append(out, name+" (no longer generated)")
		}
	}
	return out
}

// Write writes files under root.
func Write(root string, files map[string][]byte) error {
	for name, b := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cell makes text fit in a Markdown table cell: one line, and outside
// code spans no character that Markdown would read as markup.
func cell(s string) string {
	var b strings.Builder
	code := false
	for _, r := range strings.ReplaceAll(s, "\n", " ") {
		switch {
		case r == '`':
			code = !code
			b.WriteRune(r)
		case r == '|':
			b.WriteString(`\|`)
		case code:
			b.WriteRune(r)
		case r == '<':
			b.WriteString("&lt;")
		case r == '*' || r == '[' || r == ']':
			b.WriteString(`\` + string(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
