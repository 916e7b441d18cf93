// Package termtext owns making text that sandboxes or tenants control safe to
// show on an operator's terminal: file names, exception names, tenant and
// key names, egress host names, a server's error messages, a program's
// streamed output. A terminal acts on control characters (ESC starts the
// sequences that move the cursor, rewrite the title, write the clipboard,
// or make some terminals answer on the input), a newline forges a line of
// a table, and bidirectional controls reorder what is shown; each is
// written as a visible escape instead.
//
// It must never drop or reorder anything: an escape shows what was there.
package termtext

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Field returns s as one field of a line (a table cell, a name in a
// message): every character that is not printable (newline and tab
// included), a bidirectional control, a byte that is not UTF-8 and the
// backslash are escaped Go-style (\n, \x1b, \u202e, \\), so that the
// field stays on its line, does what it says, and reads back
// unambiguously.
func Field(s string) string {
	if fieldSafe(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case !printable(r):
			escapeRune(&b, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Lines is Field for text of several lines: each line is escaped, and the
// lines are kept.
func Lines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Field(l)
	}
	return strings.Join(lines, "\n")
}

func fieldSafe(s string) bool {
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || !printable(r) {
			return false
		}
	}
	return true
}

// printable: what a terminal shows as it is. unicode.IsPrint excludes the
// format characters (bidirectional controls among them) and the line and
// paragraph separators.
func printable(r rune) bool { return r == ' ' || unicode.IsPrint(r) }

func escapeRune(b *strings.Builder, r rune) {
	switch {
	case r < 0x80:
		fmt.Fprintf(b, `\x%02x`, r)
	case r <= 0xffff:
		fmt.Fprintf(b, `\u%04x`, r)
	default:
		fmt.Fprintf(b, `\U%08x`, r)
	}
}

// bidi reports whether r is a bidirectional control: it reorders what
// follows it on the line.
func bidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// streamSafe reports whether a stream keeps r as it is: printable text,
// newlines, tabs and carriage returns (a progress bar's), and the format
// characters of text (the joiners of emoji sequences); not the C0 and C1
// controls, DEL, nor bidirectional controls.
func streamSafe(r rune) bool {
	switch {
	case r == '\n' || r == '\t' || r == '\r':
		return true
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return false
	case bidi(r):
		return false
	}
	return true
}

// Writer passes a program's output stream to a terminal with every
// control a terminal acts on escaped (see streamSafe); newlines, tabs,
// carriage returns and text are unchanged. A character split across
// writes is held until it is whole; Close writes what is held.
type Writer struct {
	w    io.Writer
	held []byte
	buf  []byte
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p onto the terminal; it reports p consumed whole unless
// the terminal's write failed.
func (t *Writer) Write(p []byte) (int, error) {
	data := p
	if len(t.held) > 0 {
		data = append(t.held, p...)
		t.held = nil
	}
	out := t.buf[:0]
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRune(data[i:]) {
				t.held = append([]byte(nil), data[i:]...)
				break
			}
			out = fmt.Appendf(out, `\x%02x`, data[i])
			i++
			continue
		}
		if streamSafe(r) {
			out = append(out, data[i:i+size]...)
		} else {
			var b strings.Builder
			escapeRune(&b, r)
			out = append(out, b.String()...)
		}
		i += size
	}
	t.buf = out
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes the incomplete character still held, escaped.
func (t *Writer) Close() error {
	if len(t.held) == 0 {
		return nil
	}
	var b strings.Builder
	for _, c := range t.held {
		fmt.Fprintf(&b, `\x%02x`, c)
	}
	t.held = nil
	_, err := io.WriteString(t.w, b.String())
	return err
}

// ForTerminal returns a Writer onto w when w is a terminal, else w as it
// is: piped or redirected, output stays byte-exact.
func ForTerminal(w io.Writer) io.WriteCloser {
	if f, ok := w.(*os.File); ok && IsTerminal(f) {
		return NewWriter(w)
	}
	return nopCloser{w}
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
