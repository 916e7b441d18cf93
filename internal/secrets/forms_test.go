package secrets

import (
	"bytes"
	"encoding/base64"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// oneSecret is a session with one secret of value v, and its placeholder.
func oneSecret(t testing.TB, v string) (*Session, string) {
	t.Helper()
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	set, err := New([]Spec{{Name: "K", Env: "V", Hosts: []string{"h.test"}}}, nil, ca, []string{"V=" + v})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := set.NewSession("", []string{"K"})
	if err != nil {
		t.Fatal(err)
	}
	return ss, ss.Env()["K"]
}

func redactAll(ss *Session, r io.Reader) string {
	b, _ := io.ReadAll(ss.Redact(r))
	return string(b)
}

// The base64 of a value inside a larger text, at each of the three
// offsets of a 3-byte group, in both alphabets, padded or not, followed
// by nothing or by more: every character that carries a bit of the value
// is replaced, however the reads split the text.
func TestRedactBase64EveryOffset(t *testing.T) {
	encodings := map[string]*base64.Encoding{
		"std": base64.StdEncoding, "url": base64.URLEncoding,
		"std-raw": base64.RawStdEncoding, "url-raw": base64.RawURLEncoding,
	}
	// Lengths 0, 1 and 2 mod 3; bytes that encode to + and / (- and _).
	values := []string{"sk-\xfb\xff\xbfvalue-1", "sk-\xfb\xff\xbfvalue-12", "sk-\xfb\xff\xbfvalue-123", "abcdefgh"}
	for _, v := range values {
		ss, ph := oneSecret(t, v)
		for name, enc := range encodings {
			for pre := range 6 {
				for _, post := range []string{"", "x", "xy", "xyz!"} {
					plain := strings.Repeat("P", pre) + v + post
					text := enc.EncodeToString([]byte(plain))
					// Every character holding a bit of the value: from
					// bit 8*pre to bit 8*(pre+len(v)).
					lo, hi := 8*pre/6, (8*(pre+len(v))+5)/6
					want := text[:lo] + ph + text[hi:]
					if pre%3 == 0 && strings.Trim(text[hi:], "=") == "" {
						want = text[:lo] + ph // the whole padded form
					}
					for how, r := range map[string]io.Reader{
						"whole":    strings.NewReader("<" + text + ">"),
						"one byte": iotest.OneByteReader(strings.NewReader("<" + text + ">")),
					} {
						if got := redactAll(ss, r); got != "<"+want+">" {
							t.Errorf("%q %s, %d before, %q after, read %s:\n got %q\nwant %q", v, name, pre, post, how, got, "<"+want+">")
						}
					}
				}
			}
		}
	}
}

// The other forms: as is, URL-escaped in either case of hex; a form at
// the very start or end of a stream; a header field.
func TestRedactForms(t *testing.T) {
	v := "sk-a/b+c=d&e f"
	ss, ph := oneSecret(t, v)
	for _, tc := range []struct{ in, want string }{
		{v, ph},
		{"k=" + v + ";", "k=" + ph + ";"},
		{"q=sk-a%2Fb%2Bc%3Dd%26e+f", "q=" + ph},
		{"q=sk-a%2fb%2bc%3dd%26e+f", "q=" + ph},
		{"p=sk-a%2Fb+c=d&e%20f", "p=" + ph},
		{"p=sk-a%2fb+c=d&e%20f", "p=" + ph},
		{"nothing here", "nothing here"},
		{"sk-a/b+c=d&e", "sk-a/b+c=d&e"}, // a part is not the value
	} {
		if got := redactAll(ss, strings.NewReader(tc.in)); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
		if got := ss.RedactString(tc.in); got != tc.want {
			t.Errorf("RedactString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var none *Session
	if got := none.RedactString(v); got != v {
		t.Errorf("no session: %q", got)
	}
}

// A stream that ends in a base64 character holds back that one
// character only (it may lead a match to come); one ending otherwise
// passes whole at once.
func TestRedactHoldsBackOneEdge(t *testing.T) {
	ss, ph := oneSecret(t, "abcdefgh")
	pr, pw := io.Pipe()
	r := ss.Redact(pr)
	buf := make([]byte, 64)
	go pw.Write([]byte("data: x\n\n"))
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "data: x\n\n" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	go pw.Write([]byte("data: QW"))
	if n, _ := r.Read(buf); string(buf[:n]) != "data: Q" {
		t.Fatalf("an edge was not held: %q", buf[:n])
	}
	// QW... is the base64 of "A" then the value: W holds its first bits.
	text := base64.StdEncoding.EncodeToString([]byte("A" + "abcdefgh" + "Z"))
	go func() { pw.Write([]byte(text[2:])); pw.Close() }()
	rest, _ := io.ReadAll(r)
	if want := ph + text[12:]; string(rest) != want {
		t.Errorf("rest %q, want %q", rest, want)
	}
}

// FuzzRedact: whatever the text and however it is read, the output is
// the same, and holds no form of the value.
func FuzzRedact(f *testing.F) {
	const v = "sk-fuzz-VALUE-0123"
	for _, s := range []string{"", "x", v, "a" + v + "b"} {
		f.Add([]byte(s), 3)
	}
	for pre := range 3 {
		plain := strings.Repeat("p", pre) + v + "tail"
		f.Add([]byte(base64.StdEncoding.EncodeToString([]byte(plain))), pre+1)
		f.Add([]byte(base64.RawURLEncoding.EncodeToString([]byte(plain))), 7)
	}
	ss, _ := oneSecret(f, v)
	f.Fuzz(func(t *testing.T, in []byte, split int) {
		whole := redactAll(ss, bytes.NewReader(in))
		split = min(max(split, 0), len(in))
		parts := io.MultiReader(iotest.OneByteReader(bytes.NewReader(in[:split])), iotest.HalfReader(bytes.NewReader(in[split:])))
		if got := redactAll(ss, parts); got != whole {
			t.Fatalf("split at %d: %q, whole: %q", split, got, whole)
		}
		for _, fm := range Forms(v) {
			if strings.Contains(whole, fm) {
				t.Fatalf("%q holds the form %q", whole, fm)
			}
		}
	})
}
