package broker

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzURLTemplate: whatever the template and the value, an expanded URL
// keeps the template's origin, its number of path segments and its
// query's names, and carries no control character.
func FuzzURLTemplate(f *testing.F) {
	for _, tpl := range []string{
		"https://api.example.com/v1/{a}/items?q={b}&n={a}",
		"http://127.0.0.1:8080/{a}.json",
		"https://h/x{a}y/{b}?k=pre{a}post&fixed=1",
		"https://h",
	} {
		for _, v := range []string{"x", "..", ".", "", "a/b", "a?b#c", "%2e%2e", "\r\nX: y", "@evil.com", "//evil.com/", "é", "a&b=c", "{a}"} {
			f.Add(tpl, v, v)
		}
	}
	f.Fuzz(func(t *testing.T, tpl, a, b string) {
		tt, err := parseURL(tpl)
		if err != nil {
			return
		}
		out, err := tt.expand(map[string]any{"a": a, "b": b})
		if err != nil {
			if _, ok := err.(*ValueError); !ok {
				t.Fatalf("expand(%q) with %q, %q: %v", tpl, a, b, err)
			}
			return
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("%q does not parse: %v", out, err)
		}
		if u.Scheme+"://"+u.Host != tt.origin || u.User != nil || u.Fragment != "" {
			t.Fatalf("%q left the origin %s", out, tt.origin)
		}
		if got := strings.Count(u.EscapedPath(), "/"); got != len(tt.path) {
			t.Fatalf("%q has %d path segments, the template %d", out, got, len(tt.path))
		}
		for _, seg := range strings.Split(u.EscapedPath(), "/")[1:] {
			if seg == "." || seg == ".." {
				t.Fatalf("%q has a %q segment", out, seg)
			}
		}
		q := u.RawQuery
		var keys []string
		for _, kv := range strings.Split(q, "&") {
			if kv != "" {
				k, _, _ := strings.Cut(kv, "=")
				keys = append(keys, k)
			}
		}
		var want []string // a parameter whose placeholder has no value is left out
		for _, p := range tt.query {
			if all(names(p.val), func(n string) bool { return n == "a" || n == "b" }) {
				want = append(want, p.key)
			}
		}
		if strings.Join(keys, "&") != strings.Join(want, "&") {
			t.Fatalf("%q has query names %v, the template %v", out, keys, want)
		}
		for i := 0; i < len(out); i++ {
			if out[i] < 0x20 || out[i] == 0x7f {
				t.Fatalf("%q holds a control character", out)
			}
		}
	})
}

// FuzzArgv: an argument is never split, never adds an element, never
// makes an option where the template's element starts with a
// placeholder (no "--" before it), and
// carries no control character.
func FuzzArgv(f *testing.F) {
	for _, v := range []string{"x", "-rf", "--help", "a b", "$(id)", "\n", "-", ""} {
		f.Add("/bin/tool\x00-x\x00{a}\x00--\x00{b}", v, v)
		f.Add("/bin/tool\x00--flag={a}\x00{a}{b}", v, v)
		f.Add("git\x00log\x00{a}..HEAD\x00{b}.csv", v, v)
	}
	f.Add("git\x00log\x00{a}{b}", "", "--output=/x")
	f.Add("tool\x00\x00{a}", "-x", "")
	f.Fuzz(func(t *testing.T, argv, a, b string) {
		tt, err := parseArgv(strings.Split(argv, "\x00"))
		if err != nil {
			return
		}
		out, err := tt.expand(map[string]any{"a": a, "b": b})
		if err != nil {
			return
		}
		known := func(n string) bool { return n == "a" || n == "b" }
		j := 0
		for i, ps := range tt.args {
			if w := wholeName(ps); w != "" && !known(w) {
				continue // a lone placeholder with no value is left out
			}
			if j >= len(out) {
				t.Fatalf("%q: too few elements for the template", out)
			}
			if len(ps) > 0 && ps[0].name != "" && strings.HasPrefix(out[j], "-") && !tt.dashes[i] {
				t.Fatalf("%q: element %d is an option", out, j)
			}
			for _, c := range []byte(out[j]) {
				if c < 0x20 || c == 0x7f {
					t.Fatalf("%q holds a control character", out)
				}
			}
			j++
		}
		if j != len(out) {
			t.Fatalf("%q: %d elements, the template makes %d", out, len(out), j)
		}
	})
}

func all(list []string, f func(string) bool) bool {
	for _, s := range list {
		if !f(s) {
			return false
		}
	}
	return true
}

// TestArgvLeadingDash: a built element whose template starts with a
// placeholder never comes out as an option, however the placeholder
// is placed in it.
func TestArgvLeadingDash(t *testing.T) {
	for _, c := range []struct {
		argv []string
		args map[string]any
		want []string // nil: refused as leading_dash
	}{
		{[]string{"git", "log", "{rev}"}, map[string]any{"rev": "--output=/x"}, nil},
		{[]string{"git", "-C", "/srv/r", "log", "{rev}..HEAD"}, map[string]any{"rev": "--output=/srv/r/.git/hooks/x"}, nil},
		{[]string{"tool", "{name}.csv"}, map[string]any{"name": "-rf"}, nil},
		{[]string{"tool", "{a}{b}"}, map[string]any{"a": "-", "b": "x"}, nil},
		{[]string{"tool", "{a}{b}"}, map[string]any{"a": "", "b": "--help"}, nil},
		{[]string{"git", "log", "{rev}..HEAD"}, map[string]any{"rev": "main"}, []string{"git", "log", "main..HEAD"}},
		{[]string{"tool", "{a}{b}"}, map[string]any{"a": "x", "b": "-y"}, []string{"tool", "x-y"}},
		{[]string{"tool", "--flag={a}"}, map[string]any{"a": "-v"}, []string{"tool", "--flag=-v"}},
		{[]string{"tool", "./{a}"}, map[string]any{"a": "-v"}, []string{"tool", "./-v"}},
		{[]string{"tool", "--", "{a}.csv"}, map[string]any{"a": "-v"}, []string{"tool", "--", "-v.csv"}},
	} {
		tt, err := parseArgv(c.argv)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tt.expand(c.args)
		if c.want == nil {
			var ve *ValueError
			if !errors.As(err, &ve) || ve.Rule != "leading_dash" {
				t.Errorf("%q %v: got %q, %v; want a leading_dash refusal", c.argv, c.args, out, err)
			}
			continue
		}
		if err != nil || !slices.Equal(out, c.want) {
			t.Errorf("%q %v: got %q, %v; want %q", c.argv, c.args, out, err, c.want)
		}
	}
}
