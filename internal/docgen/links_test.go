package docgen

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every relative link of the README, CONTRIBUTING and the docs names a
// file that exists and, for a Markdown file, a heading it has.
func TestDocLinks(t *testing.T) {
	root := "../.."
	files := []string{"README.md", "CONTRIBUTING.md", "sdk/python/README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("only %d Markdown files found: %v", len(files), files)
	}
	for _, f := range files {
		broken, err := BrokenLinks(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(strings.TrimPrefix(b, root+"/"))
		}
	}
}

func TestBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.md"), []byte("# B\n\n## `airlock run` — one program\n\n## Twice\n\n## Twice\n\n```\n# not a heading\n```\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.md"), []byte(strings.Join([]string{
		"# A", "## Here",
		"[ok](b.md) [ok](b.md#b) [ok](b.md#airlock-run--one-program) [ok](b.md#twice-1) [ok](#here) [ok](https://x.test/#y)",
		"`[code](nowhere.md)` [bad](c.md) [bad](b.md#twice-2) [bad](#there) [bad](b.md#not-a-heading)",
		"```", "[in a fence](nowhere.md)", "```",
	}, "\n")), 0o644)
	got, err := BrokenLinks(filepath.Join(dir, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"c.md", "b.md#twice-2", "#there", "b.md#not-a-heading"}
	if len(got) != len(want) {
		t.Fatalf("broken = %q, want the links %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], ": "+w+": ") {
			t.Errorf("broken[%d] = %q, want %s", i, got[i], w)
		}
	}
}
