package coderules

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"airlock/internal/errdefs"
)

func TestCheck(t *testing.T) {
	s, err := New([]Rule{
		{Name: "no-subprocess", Language: "python", Pattern: `\bsubprocess\b|\bos\.system\b`, Action: Deny, Message: "use the commands API"},
		{Name: "network", Pattern: `(?i)\b(?:requests|urllib|curl|wget|fetch)\b`, Action: Flag},
		{Name: "eval", Language: "javascript", Pattern: `\beval\s*\(`, Action: Flag},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lang, code string
		flags      []string
		denied     string
	}{
		{"python", "print(1)", nil, ""},
		{"python", "import requests\nrequests.get(u)", []string{"network"}, ""},
		{"python", "import subprocess; import requests", nil, "no-subprocess"},
		{"bash", "subprocess=1; curl x", []string{"network"}, ""}, // the python rule does not apply
		{"javascript", "eval('1'); fetch(u)", []string{"network", "eval"}, ""},
		// Not a boundary: the same call, spelled at run time, passes.
		{"python", `getattr(__import__("sub"+"process"), "run")(["id"])`, nil, ""},
	} {
		flags, err := s.Check(c.lang, c.code)
		var d *Denied
		switch {
		case c.denied != "":
			if !errors.As(err, &d) || d.Rule != c.denied || errdefs.HTTPStatus(err) != 403 || !strings.Contains(err.Error(), `"`+c.denied+`"`) {
				t.Errorf("%s %q: %v, want denied by %s (403)", c.lang, c.code, err, c.denied)
			}
		case err != nil || !slices.Equal(flags, c.flags):
			t.Errorf("%s %q: %v %v, want flags %v", c.lang, c.code, flags, err, c.flags)
		}
	}
	var none *Set
	if f, err := none.Check("python", "import subprocess"); f != nil || err != nil {
		t.Error("a nil set matched")
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Name: "x", Pattern: `(`, Action: Flag}, "missing closing )"},
		{Rule{Name: "x", Pattern: `a*`, Action: Flag}, "matches any code"},
		{Rule{Name: "x", Pattern: `a`, Action: "block"}, `action "block"`},
		{Rule{Name: "bad name", Pattern: `a`, Action: Flag}, "code rule name"},
	} {
		if _, err := New([]Rule{c.r}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
}
