package redact

import (
	"regexp"
	"testing"
)

// shapeTexts match the IP rules, or nearly: every address form the rules
// take, cut and padded, and the near misses.
var shapeTexts = []string{
	"10.0.0.1", "host 192.168.1.254:8080 up", "x=255.255.255.255;", "1.2.3.4", "0.0.0.0", "999.1.1.1", "1.2.3.999",
	"1.2.3", "1..2.3.4", "1.2345.6.7", "a1.2.3.4b", "v1.2.3.4", "(127.0.0.1)", "1.2.3.4.5.6", "12.34.56.78/24",
	"::1", "fe80::1", "::", "[::ffff:169.254.169.254]", "2001:db8::ff00:42:8329", "2001:0db8:0000:0000:0000:ff00:0042:8329",
	"1:2:3:4:5:6:7:8", "abcd:ef01::", "a::b", "Abc::", "12345::1", "fe80::1%eth0", "x::y", "1:2", "a:b:c", "time 12:30:45",
	"epoch 3: loss=0.25 on host-7", "", ":", "::::", "1.2.3.4::5:6",
}

// shapes are the built-in rules' shapes (Rule.needs), by rule name.
func shapes() map[string]func([]byte) bool {
	m := map[string]func([]byte) bool{}
	for _, set := range builtin {
		for _, r := range set {
			if r.needs != nil {
				m[r.Name] = r.needs
			}
		}
	}
	return m
}

// A built-in rule's shape must be in every text the rule matches in:
// otherwise a text that holds an address but not the shape would keep
// its address. The IP rules have one, and a Redactor built with them
// looks for it.
func TestShapesAreNecessary(t *testing.T) {
	shapes := shapes()
	for _, r := range builtin[IPAddresses] {
		if shapes[r.Name] == nil {
			t.Errorf("the built-in rule %s has no shape", r.Name)
		}
	}
	for name, has := range shapes {
		re := builtinRule(t, name)
		for _, s := range shapeTexts {
			if re.MatchString(s) && !has([]byte(s)) {
				t.Errorf("%s matches %q, but its shape is not there", name, s)
			}
		}
	}
	// And it is a filter: a line of ordinary output has neither shape.
	for _, s := range []string{"epoch 3: loss=0.25 on host-7", "version 1.2.3 at 12:30"} {
		for name, has := range shapes {
			if has([]byte(s)) {
				t.Errorf("%s's shape found in %q", name, s)
			}
		}
	}
	// Redacting goes on finding them.
	r := mustNew(t, []string{IPAddresses})
	for _, x := range r.rules {
		if x.needs == nil {
			t.Errorf("the Redactor's rule %s looks for no shape", x.name)
		}
	}
	if got, n := r.String("from 10.0.0.1 and fe80::1, epoch 3: loss=0.25"); n != 2 || got != "from [REDACTED:ipv4] and [REDACTED:ipv6], epoch 3: loss=0.25" {
		t.Errorf("redacted %q, %d", got, n)
	}
}

// The same on any text.
func FuzzShapesAreNecessary(f *testing.F) {
	for _, s := range shapeTexts {
		f.Add(s)
	}
	shapes := shapes()
	res := map[string]*regexp.Regexp{}
	for name := range shapes {
		res[name] = builtinRule(f, name)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, has := range shapes {
			if res[name].MatchString(s) && !has([]byte(s)) {
				t.Fatalf("%s matches %q, but its shape is not there", name, s)
			}
		}
	})
}

// builtinRule is the regexp of the built-in rule named name.
func builtinRule(t testing.TB, name string) *regexp.Regexp {
	t.Helper()
	for _, set := range builtin {
		for _, r := range set {
			if r.Name == name {
				return regexp.MustCompile(r.Pattern)
			}
		}
	}
	t.Fatalf("shape of %q: no built-in rule of that name", name)
	return nil
}
