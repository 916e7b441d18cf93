package session

import (
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
)

// The live chunks of a stream never split a UTF-8 sequence, whatever the
// pipe's chunk boundaries, and hold nothing back but an incomplete one:
// after each write they are the bytes written so far up to the last
// complete character. Together they are the captured bytes.
func TestStreamChunksKeepUTF8Whole(t *testing.T) {
	text := "héllo wörld ✓ 😀 end"
	for split := 1; split <= len(text); split++ {
		var got []string
		s := stream{max: 1 << 20, live: func(b []byte) { got = append(got, string(b)) }}
		for i := 0; i < len(text); i += split {
			end := min(i+split, len(text))
			s.write([]byte(text[i:end]))
			complete := end // back to the start of the character end is in
			for complete < len(text) && !utf8.RuneStart(text[complete]) {
				complete--
			}
			if live := strings.Join(got, ""); live != text[:complete] {
				t.Fatalf("split %d: after writing %q the chunks are %q, want %q", split, text[:end], live, text[:complete])
			}
		}
		s.flush()
		for _, c := range got {
			if !utf8.ValidString(c) {
				t.Fatalf("split %d: chunk %q is not UTF-8", split, c)
			}
		}
		if strings.Join(got, "") != text || string(s.buf) != text {
			t.Fatalf("split %d: chunks %q, buf %q", split, got, s.buf)
		}
	}
}

// Past its cap a stream keeps nothing more, counts what it dropped, and
// says so once, after the last chunk it sent.
func TestStreamTruncates(t *testing.T) {
	var events []string
	s := stream{max: 10, name: "stdout", live: func(b []byte) { events = append(events, string(b)) },
		full: func(e apitype.Event) { events = append(events, e.Type+" "+e.Stream) }}
	s.write([]byte("0123456"))
	s.write([]byte("789abc"))
	s.write([]byte("more"))
	s.drop(1000) // dropped unread by the pipe's reader
	s.flush()
	if string(s.buf) != "0123456789" || !s.truncated || s.dropped != 3+4+1000 {
		t.Fatalf("buf %q truncated %v dropped %d", s.buf, s.truncated, s.dropped)
	}
	if want := []string{"0123456", "789", "truncated stdout"}; !slices.Equal(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
}

// Program runs stream bytes that are not UTF-8 unchanged, as base64; cells
// replace them, as the final result always does.
func TestExecutionEvents(t *testing.T) {
	for _, lossless := range []bool{false, true} {
		var events []apitype.Event
		ex := newExecution(1<<20, 32<<20, func(e apitype.Event) { events = append(events, e) }, lossless)
		ex.output([]byte("ok\n"), false)
		ex.output([]byte{0xff, 0x00, 'x'}, false)
		ex.output([]byte("err\n"), true)
		ex.stdout.flush()
		var out []byte
		for _, e := range events {
			if e.Type != "stdout" {
				continue
			}
			if e.DataBase64 != "" {
				if !lossless || e.Text != "" {
					t.Fatalf("lossless=%v: event %+v", lossless, e)
				}
				b, err := base64.StdEncoding.DecodeString(e.DataBase64)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, b...)
			} else {
				out = append(out, e.Text...)
			}
		}
		want := "ok\n\xff\x00x"
		if !lossless {
			want = "ok\n\uFFFD\x00x"
		}
		if string(out) != want {
			t.Errorf("lossless=%v: streamed %q, want %q", lossless, out, want)
		}
		if got := toValidUTF8(ex.stdout.buf); got != "ok\n\uFFFD\x00x" {
			t.Errorf("lossless=%v: result %q", lossless, got)
		}
		if !slices.ContainsFunc(events, func(e apitype.Event) bool { return e.Type == "stderr" && e.Text == "err\n" }) {
			t.Errorf("lossless=%v: no stderr event with \"err\\n\" in %+v", lossless, events)
		}
	}
}

func TestValidateEnv(t *testing.T) {
	cases := []struct {
		env map[string]string
		ok  bool
	}{
		{nil, true},
		{map[string]string{"A": "1", "_B2": "", "a": strings.Repeat("x", 200<<10)}, true},
		{map[string]string{"1A": "x"}, false},
		{map[string]string{"A-B": "x"}, false},
		{map[string]string{"": "x"}, false},
		{map[string]string{strings.Repeat("A", 257): "x"}, false},
		{map[string]string{"A": "x\x00y"}, false},
		{map[string]string{"A": strings.Repeat("x", 300<<10)}, false},
		{map[string]string{"A": strings.Repeat("x", 128<<10), "B": strings.Repeat("x", 128<<10)}, false},
	}
	for _, c := range cases {
		err := ValidateEnv(c.env, 128)
		if c.ok && err != nil {
			t.Errorf("%.40v: %v", c.env, err)
		}
		if !c.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%.40v: %v, want ErrInvalidArgument", c.env, err)
		}
	}
	// Exactly maxN variables are allowed, one more is not.
	for _, maxN := range []int{0, 1, 128} {
		env := map[string]string{}
		for i := 0; i < maxN; i++ {
			env["V"+strconv.Itoa(i)] = "x"
		}
		if err := ValidateEnv(env, maxN); err != nil {
			t.Errorf("%d variables with a cap of %d: %v", len(env), maxN, err)
		}
		env["V"+strconv.Itoa(maxN)] = "x"
		if err := ValidateEnv(env, maxN); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%d variables with a cap of %d: %v, want ErrInvalidArgument", len(env), maxN, err)
		}
	}
}
