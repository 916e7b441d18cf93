package secrets

import (
	"encoding/base64"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// form is one way an answer may echo a value. The base64 of a value in
// a larger text depends on where the value starts in its 3-byte group:
// for each of the three offsets, in each alphabet, the characters that
// only the value's bits make up are a form (padding or none does not
// matter: it is never among them), and the character just before them
// (lead) or just after (trail), which mixes the value's first or last
// bits with its neighbours', is replaced with them.
type form struct {
	text        string
	lead, trail bool
}

// formsOf are the forms of v: as it is, URL-escaped (upper and lower
// case hex), and base64-encoded in both alphabets, padded or not, whole
// and at each of the three offsets.
func formsOf(v string) []form {
	var out []form
	add := func(f form) {
		for _, o := range out {
			if o.text == f.text {
				return
			}
		}
		out = append(out, f)
	}
	for _, s := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
		add(form{text: s})
		add(form{text: lowerHex(s)})
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		add(form{text: enc.EncodeToString([]byte(v))})
		raw := enc.WithPadding(base64.NoPadding)
		add(form{text: raw.EncodeToString([]byte(v))})
		for off := range 3 {
			bits := 8 * (off + len(v))
			text := raw.EncodeToString(append(make([]byte, off), v...))[(8*off+5)/6 : bits/6]
			add(form{text: text, lead: off > 0, trail: bits%6 != 0})
		}
	}
	return out
}

var escapedHex = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`%[0-9A-F]{2}`) })

// lowerHex is s with its percent-escapes in lower case.
func lowerHex(s string) string {
	return escapedHex().ReplaceAllStringFunc(s, strings.ToLower)
}

// Redact reads r with every form of the session's values replaced by
// their placeholders (nil session: r as it is).
func (ss *Session) Redact(r io.Reader) io.ReadCloser {
	if ss == nil {
		return io.NopCloser(r)
	}
	var forms []form
	var new [][]byte
	for _, b := range ss.binds {
		for _, f := range b.forms {
			forms, new = append(forms, f), append(new, []byte(b.placeholder))
		}
	}
	return newFormReplacer(r, forms, new)
}

// RedactString is Redact for a string (a header field's name or value).
func (ss *Session) RedactString(s string) string {
	if ss == nil || !ss.holds(s) {
		return s
	}
	b, _ := io.ReadAll(ss.Redact(strings.NewReader(s)))
	return string(b)
}

// holds reports whether s holds a form of a value of the session's.
func (ss *Session) holds(s string) bool {
	for _, b := range ss.binds {
		for _, f := range b.forms {
			if strings.Contains(s, f.text) {
				return true
			}
		}
	}
	return false
}

// Scrubber replaces every form of one value in a text, edges included
// (see form): a brokered tool's answer loses its credential so.
type Scrubber struct {
	forms []form
	with  [][]byte
}

// NewScrubber replaces the forms of v by with.
func NewScrubber(v, with string) *Scrubber {
	sc := &Scrubber{forms: formsOf(v)}
	for range sc.forms {
		sc.with = append(sc.with, []byte(with))
	}
	return sc
}

// Scrub returns s with every form of the value replaced (nil: s).
func (sc *Scrubber) Scrub(s string) string {
	if sc == nil || !slices.ContainsFunc(sc.forms, func(f form) bool { return strings.Contains(s, f.text) }) {
		return s
	}
	b, _ := io.ReadAll(newFormReplacer(strings.NewReader(s), sc.forms, sc.with))
	return string(b)
}
