package workspace

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"airlock/internal/errdefs"
)

func TestCleanAccepts(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	deep := strings.TrimSuffix(strings.Repeat("d/", MaxPathDepth), "/")
	for _, c := range []struct{ in, want string }{
		{"", ""}, {".", ""}, {"./", ""}, {"/workspace", ""}, {"/workspace/", ""}, {"/workspace/.", ""}, {"/workspace//", ""},
		{"a", "a"}, {"a/b.txt", "a/b.txt"}, {"./a/b", "a/b"}, {"a//b", "a/b"}, {"a/./b", "a/b"}, {"a/", "a"},
		{"/workspace/a/b", "a/b"}, {"/workspace//a", "a"}, {"/workspace/./a", "a"}, {"a/b/./c/.", "a/b/c"},
		// Names that merely look like dots.
		{"...", "..."}, {"....", "...."}, {".hidden", ".hidden"}, {"a..b", "a..b"}, {"..a", "..a"}, {"a..", "a.."},
		{"..\\x", "..\\x"}, {"\u2024\u2024", "\u2024\u2024"}, {"\uff0e\uff0e", "\uff0e\uff0e"},
		{"workspace/a", "workspace/a"}, {"data set/r\u00e9sum\u00e9 (1).csv", "data set/r\u00e9sum\u00e9 (1).csv"},
		{"\u30d5\u30a1\u30a4\u30eb", "\u30d5\u30a1\u30a4\u30eb"}, {"\U0001F600", "\U0001F600"},
		// Characters next to the control ones.
		{"a b", "a b"}, {"~", "~"}, {"a\u00a0b", "a\u00a0b"}, {"\u2028", "\u2028"}, {"\u200b", "\u200b"},
		// The limits themselves.
		{long, long}, {deep, deep}, {"/workspace/" + deep, deep},
	} {
		got, err := Clean(c.in)
		if err != nil || got != c.want {
			t.Errorf("Clean(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	// Exactly MaxPathLen bytes: ten 100-byte names and a 14-byte one.
	exact := strings.Repeat(strings.Repeat("p", 100)+"/", 10) + strings.Repeat("p", 14)
	if len(exact) != MaxPathLen {
		t.Fatalf("test bug: built %d bytes", len(exact))
	}
	if got, err := Clean(exact); err != nil || got != exact {
		t.Errorf("Clean(%d-byte path) = %v", len(exact), err)
	}
}

func TestCleanRejects(t *testing.T) {
	tooDeep := strings.TrimSuffix(strings.Repeat("d/", MaxPathDepth+1), "/")
	for _, in := range []string{
		// Traversal.
		"..", "../", "../x", "./..", "a/..", "a/../b", "a/../../b", "a/b/../../..", "x/../../etc/passwd",
		"/workspace/..", "/workspace/../etc/passwd", "/workspace/a/../..", "/workspace/./..", "a/./../..",
		// Absolute paths outside /workspace.
		"/", "//", "/etc/passwd", "/tmp/x", "/workspacex/a", "/workspace..", "/workspace../a", "//workspace/a",
		"/proc/self/root/etc/passwd", "/./workspace/a", "/../workspace/a",
		// NUL and the other control characters: C0, DEL, C1.
		"\x00", "a\x00b", "a\x00/../../etc", "a\nb", "\t", "a\rb", "a\x1b[31mb", "\x01", "\x1f", "\x7f", "a\u0085b",
		"\u0080", "\u009b", "\u009f", "/workspace/a\x1b", "dir/\x07bell",
		// Invalid UTF-8.
		"\xff", "a\xc3", "\xc0\xae\xc0\xae/x", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80",
		// Too long, too deep.
		strings.Repeat("n", MaxNameLen+1), "a/" + strings.Repeat("n", MaxNameLen+1), strings.Repeat("x", MaxPathLen+1),
		strings.Repeat("a/", MaxPathLen), tooDeep, "/workspace/" + tooDeep, strings.Repeat("./", MaxPathLen/2+1) + "a",
	} {
		got, err := Clean(in)
		if err == nil {
			t.Errorf("Clean(%q) = %q, want an error", in, got)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Clean(%q): %v does not wrap ErrInvalidArgument", in, err)
		}
		if got != "" {
			t.Errorf("Clean(%q) returned %q with its error", in, got)
		}
		// The message quotes the path safely, and briefly.
		if strings.ContainsAny(err.Error(), "\x00\n") || len(err.Error()) > 300 {
			t.Errorf("Clean(%q): error message %q", in, err)
		}
	}
}

// checkCleaned asserts every invariant of a path Clean returned.
func checkCleaned(t *testing.T, in, c string) {
	t.Helper()
	if strings.HasPrefix(c, "/") || strings.IndexFunc(c, unicode.IsControl) >= 0 || !utf8.ValidString(c) || len(c) > MaxPathLen {
		t.Fatalf("Clean(%q) = %q", in, c)
	}
	if c == "" {
		return
	}
	parts := strings.Split(c, "/")
	if len(parts) > MaxPathDepth {
		t.Fatalf("Clean(%q) = %q: %d levels", in, c, len(parts))
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || len(p) > MaxNameLen {
			t.Fatalf("Clean(%q) = %q: component %q", in, c, p)
		}
	}
	again, err := Clean(c)
	if err != nil || again != c {
		t.Fatalf("Clean is not idempotent: Clean(%q) = %q, then %q, %v", in, c, again, err)
	}
	// The absolute form sandboxed code sees names the same file.
	if abs, err := Clean("/workspace/" + c); err != nil || abs != c {
		t.Fatalf("Clean(/workspace/%s) = %q, %v", c, abs, err)
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"", ".", "a/b", "./a", "/workspace", "/workspace/a", "..", "a/../b", "/etc/passwd",
		"a\x00b", "\xff", "a//b", "...", "/workspace/..", "a/./b/", "\u009b", strings.Repeat("a/", 40),
		strings.Repeat("x", 300), "//workspace/a", "/workspace//../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Clean(in)
		if err != nil {
			if c != "" || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Clean(%q) = %q, %v", in, c, err)
			}
			return
		}
		checkCleaned(t, in, c)
		// No input containing a ".." component is ever accepted.
		for _, p := range strings.Split(in, "/") {
			if p == ".." {
				t.Fatalf("Clean(%q) accepted a .. component: %q", in, c)
			}
		}
	})
}
