package termtext

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Payloads a tenant's code can put in a file name, an exception's name or
// its output.
var hostile = []string{
	"line\nTIME  KIND  forged row",              // a forged table row
	"\x1b[2J\x1b[H",                             // CSI: clear the screen
	"\x1b]0;owned\x07",                          // OSC: the window title
	"\x1b]52;c;ZWNobyBoaQ==\x07",                // OSC 52: write the clipboard
	"\x1b]8;;http://evil/\x1b\\x\x1b]8;;\x1b\\", // OSC 8: a hyperlink
	"\x1bP+q544e\x1b\\",                         // DCS: ask the terminal to answer
	"\u009b31m",                                 // C1 CSI, as UTF-8
	"\x9b31m",                                   // C1 CSI, a raw byte
	"a\u202eexe.txt",                            // RLO: reorders the rest of the line
	"\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202c\u202d",
	"tab\there\rcr\bbs\x7fdel\x00nul",
	"\xff\xfe\xc3", // not UTF-8
	"line\u2028sep\u2029para",
	`back\slash \n literal`,
}

// unsafeAt returns the index of the first byte a terminal could act on
// (C0 but newline where allowed, DEL, C1, bidirectional controls, bytes
// that are not UTF-8), or -1. It is the tests' own, not the package's.
func unsafeAt(s string, keep string) int {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return i
		case strings.ContainsRune(keep, r):
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return i
		case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return i
		}
	}
	return -1
}

func TestField(t *testing.T) {
	for _, s := range hostile {
		f := Field(s)
		if i := unsafeAt(f, ""); i >= 0 {
			t.Errorf("Field(%q) = %q: unsafe at %d", s, f, i)
		}
		if strings.ContainsAny(f, "\u2028\u2029") {
			t.Errorf("Field(%q) = %q keeps a line separator", s, f)
		}
		if back := unquote(t, f); back != s {
			t.Errorf("Field(%q) = %q reads back as %q", s, f, back)
		}
	}
	for _, s := range []string{"", "plain", "café ünïcode 日本 👨‍👩‍👧", "sha256:ab/12B"} {
		if f := Field(s); f != s && !strings.Contains(s, "\u200d") {
			t.Errorf("Field(%q) = %q, want it unchanged", s, f)
		}
	}
	if got := Lines("ok\n\x1b[31mred\nend"); got != "ok\n\\x1b[31mred\nend" {
		t.Errorf("Lines: %q", got)
	}
}

// unquote reads a Field back (Go's escapes, no quotes).
func unquote(t *testing.T, f string) string {
	t.Helper()
	s, err := strconv.Unquote(`"` + strings.ReplaceAll(f, `"`, `\"`) + `"`)
	if err != nil {
		t.Fatalf("%q does not read back: %v", f, err)
	}
	return s
}

func FuzzField(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Field(s)
		if i := unsafeAt(out, ""); i >= 0 || strings.ContainsAny(out, "\n\t\r") {
			t.Fatalf("Field(%q) = %q: unsafe", s, out)
		}
		if back := unquote(t, out); back != s {
			t.Fatalf("Field(%q) = %q reads back as %q", s, out, back)
		}
	})
}

// A stream keeps text, newlines, tabs and carriage returns, escapes the
// rest, whatever the writes' boundaries (a character may arrive in two).
func TestWriter(t *testing.T) {
	all := strings.Join(hostile, "|") + "done 👨‍👩‍👧 café\r\n"
	var whole bytes.Buffer
	w := NewWriter(&whole)
	w.Write([]byte(all))
	w.Close()
	out := whole.String()
	if i := unsafeAt(out, "\n\t\r"); i >= 0 {
		t.Fatalf("unsafe at %d: %q", i, out[i:])
	}
	for _, keep := range []string{"line\nTIME  KIND  forged row", "tab\there\rcr", "done 👨‍👩‍👧 café\r\n", `back\slash \n literal`} {
		if !strings.Contains(out, keep) {
			t.Errorf("%q lost %q", out, keep)
		}
	}
	for _, esc := range []string{`\x1b[2J`, `\u009b31m`, `\x9b31m`, `a\u202eexe`, `\x08bs\x7fdel\x00nul`, `\xff\xfe\xc3|`} {
		if !strings.Contains(out, esc) {
			t.Errorf("%q lacks %q", out, esc)
		}
	}
	for cut := 1; cut < len(all); cut++ {
		var b bytes.Buffer
		w := NewWriter(&b)
		w.Write([]byte(all[:cut]))
		w.Write([]byte(all[cut:]))
		w.Close()
		if b.String() != out {
			t.Fatalf("split at %d: %q, want %q", cut, b.String(), out)
		}
	}
	// A character cut short at the end is shown as its bytes.
	var b bytes.Buffer
	w = NewWriter(&b)
	w.Write([]byte("x\xe2\x80"))
	if b.String() != "x" {
		t.Errorf("before Close: %q", b.String())
	}
	w.Close()
	if b.String() != `x\xe2\x80` {
		t.Errorf("after Close: %q", b.String())
	}
}

// Only a terminal gets the escaping writer; a file or pipe gets the bytes.
func TestForTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := ForTerminal(f).(*Writer); ok {
		t.Error("a file got the terminal's writer")
	}
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	defer ptm.Close()
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	if _, ok := ForTerminal(pts).(*Writer); !ok {
		t.Error("a terminal got the bytes unescaped")
	}
}
