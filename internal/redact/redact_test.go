package redact

import (
	"bytes"
	"strings"
	"testing"
)

func mustNew(t testing.TB, sets []string, rules ...Rule) *Redactor {
	t.Helper()
	r, err := New(sets, rules)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const pemKey = `-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun
VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK
-----END RSA PRIVATE KEY-----`

// Each built-in set redacts what it names, keeps what it does not, and
// says how many it replaced; every set is off unless named.
func TestBuiltinSets(t *testing.T) {
	for _, c := range []struct {
		set, in, want string
		n             int
	}{
		{Credentials, "key AKIAIOSFODNN7EXAMPLE end", "key [REDACTED:aws_access_key_id] end", 1},
		{Credentials, "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = [REDACTED:aws_secret_access_key]", 1},
		{Credentials, "AIzaSyA-1234567890abcdefghijklmnopqrstu", "[REDACTED:gcp_api_key]", 1},
		{Credentials, "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + strings.Repeat("A", 86) + "==;", "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=[REDACTED:azure_storage_key];", 1},
		{Credentials, "token ghp_" + strings.Repeat("a", 36), "token [REDACTED:github_token]", 1},
		{Credentials, "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "[REDACTED:github_pat]", 1},
		{Credentials, "SLACK=xoxb-1234567890-abcdefghij", "SLACK=[REDACTED:slack_token]", 1},
		{Credentials, "OPENAI_API_KEY: sk-proj-abcdefghijklmnopqrstuvwxyz012345", "OPENAI_API_KEY: [REDACTED:openai_key]", 1},
		{Credentials, "Authorization: Bearer abc.def-ghi_jkl~123", "Authorization: Bearer [REDACTED:bearer_token]", 1},
		{Credentials, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "[REDACTED:jwt]", 1},
		{Credentials, "password=hunter2&user=bob", "password=[REDACTED:secret_pair]&user=bob", 1},
		{Credentials, `{"secret": "s3cr3t", "token":"t0k"}`, `{"secret": "[REDACTED:secret_pair]", "token":"[REDACTED:secret_pair]"}`, 2},
		{Credentials, "before\n" + pemKey + "\nafter", "before\n[REDACTED:private_key]\nafter", 1},
		{Credentials, "nothing to see: password reset, tokens, AKIA", "nothing to see: password reset, tokens, AKIA", 0},
		// Literals after the match's start (streamed byte by byte below,
		// the start is held back until the literal comes).
		{Credentials, "client_secret=abc access_token: xyz PRIVATE_KEY=pk", "client_secret=[REDACTED:secret_pair] access_token: [REDACTED:secret_pair] PRIVATE_KEY=[REDACTED:secret_pair]", 3},
		{Credentials, "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_access_key]", 1},
		{Credentials, "hook https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX", "hook [REDACTED:slack_webhook]", 1},
		{Credentials, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----", "[REDACTED:private_key]", 1},
		// (?i) matches the long s and the Kelvin sign as s and k.
		{Credentials, "pa\u017f\u017fword=x api_\u212Aey=y", "pa\u017f\u017fword=[REDACTED:secret_pair] api_\u212Aey=[REDACTED:secret_pair]", 2},
		{HostPaths, `File "/usr/lib/python3.11/json/decoder.py", line 3`, `File "[REDACTED:host_path]", line 3`, 1},
		{HostPaths, "cat /home/alice/.ssh/id_rsa and /etc/passwd", "cat [REDACTED:host_path] and [REDACTED:host_path]", 2},
		{HostPaths, "/workspace/out.csv and a/etc/b and /usr", "/workspace/out.csv and a/etc/b and /usr", 0},
		{HostPaths, `C:\Users\bob\secret.txt`, `[REDACTED:windows_path]`, 1},
		{IPAddresses, "from 10.1.2.3 to 192.168.0.254:80", "from [REDACTED:ipv4] to [REDACTED:ipv4]:80", 2},
		{IPAddresses, "v6 2001:db8:0:0:0:0:2:1 and fe80::1ff:fe23:4567:890a and ::1", "v6 [REDACTED:ipv6] and [REDACTED:ipv6] and [REDACTED:ipv6]", 3},
		{IPAddresses, "version 1.2.3, 999.1.1.1, std::vector, 12:30:45, aa:bb:cc:dd:ee:ff", "version 1.2.3, 999.1.1.1, std::vector, 12:30:45, aa:bb:cc:dd:ee:ff", 0},
	} {
		r := mustNew(t, []string{c.set})
		got, n := r.String(c.in)
		if got != c.want || n != c.n {
			t.Errorf("%s: %q\n got %q (%d)\nwant %q (%d)", c.set, c.in, got, n, c.want, c.n)
		}
		// Streamed a byte at a time, the same.
		var out bytes.Buffer
		s := r.Stream(func(b []byte) { out.Write(b) })
		for i := range len(c.in) {
			s.Write([]byte{c.in[i]})
		}
		s.Flush()
		if out.String() != c.want || s.Count() != c.n {
			t.Errorf("%s streamed byte by byte: %q (%d), want %q (%d)", c.set, out.String(), s.Count(), c.want, c.n)
		}
		// Each rule alone, streamed byte by byte, as it does the whole:
		// its literals and their offset are right (nothing it matches is
		// passed on before its literal arrives).
		rules, _ := Set(c.set)
		for _, rule := range rules {
			one := mustNew(t, nil, rule)
			want, wantN := one.String(c.in)
			var out bytes.Buffer
			s := one.Stream(func(b []byte) { out.Write(b) })
			for i := range len(c.in) {
				s.Write([]byte{c.in[i]})
			}
			s.Flush()
			if out.String() != want || s.Count() != wantN {
				t.Errorf("rule %s streamed byte by byte: %q (%d), want %q (%d)", rule.Name, out.String(), s.Count(), want, wantN)
			}
		}
		// Other sets leave it alone.
		for _, other := range Sets() {
			if other == c.set || c.n == 0 {
				continue
			}
			if _, n := mustNew(t, []string{other}).String(c.in); n == c.n && other != Credentials {
				// host paths and addresses never look like these.
				t.Errorf("set %s also redacts %q", other, c.in)
			}
		}
	}
	if r := mustNew(t, nil); r != nil {
		t.Error("no sets and no rules: want a nil Redactor")
	}
	var none *Redactor
	if got, n := none.String("AKIAIOSFODNN7EXAMPLE"); n != 0 || got != "AKIAIOSFODNN7EXAMPLE" {
		t.Error("a nil Redactor redacted")
	}
}

func TestOperatorRules(t *testing.T) {
	r := mustNew(t, nil, Rule{Name: "ticket", Pattern: `\bTICKET-[0-9]{4,8}\b`}, Rule{Name: "internal_host", Pattern: `(?i)[a-z0-9-]{1,63}\.corp\.example\.com`})
	got, n := r.String("see TICKET-12345 on build-7.corp.example.com")
	if want := "see [REDACTED:ticket] on [REDACTED:internal_host]"; got != want || n != 2 {
		t.Errorf("got %q (%d), want %q", got, n, want)
	}
	for _, c := range []struct {
		rules []Rule
		sets  []string
		err   string
	}{
		{[]Rule{{Name: "x", Pattern: `a+`}}, nil, "bound every repetition"},
		{[]Rule{{Name: "x", Pattern: `a{1,}`}}, nil, "bound every repetition"},
		{[]Rule{{Name: "x", Pattern: strings.Repeat(`.{1000}`, 5)}}, nil, "more than"},
		{[]Rule{{Name: "x", Pattern: `a?`}}, nil, "empty string"},
		{[]Rule{{Name: "x", Pattern: `\b`}}, nil, "empty string"},
		{[]Rule{{Name: "x", Pattern: `(`}}, nil, "missing closing )"},
		{[]Rule{{Name: "", Pattern: `a`}}, nil, "rule name"},
		{[]Rule{{Name: "a b", Pattern: `a`}}, nil, "rule name"},
		{[]Rule{{Name: "x", Pattern: `a`}, {Name: "x", Pattern: `b`}}, nil, "used twice"},
		{nil, []string{"passwords"}, "unknown built-in rule set"},
	} {
		_, err := New(c.sets, c.rules)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v %v: error %v, want %q", c.sets, c.rules, err, c.err)
		}
	}
}

// With adds rules to a redactor's without changing it; their names
// must be new, and the sum under MaxRules.
func TestWith(t *testing.T) {
	base := mustNew(t, []string{"credentials"}, Rule{Name: "ticket", Pattern: `TICKET-[0-9]{4,8}`})
	more, err := base.With([]Rule{{Name: "mine", Pattern: `(?:hunter2-secret|aHVudGVy)`, Literals: []string{"hunter2-secret", "aHVudGVy"}}})
	if err != nil {
		t.Fatal(err)
	}
	text := "TICKET-1234 hunter2-secret AKIAIOSFODNN7EXAMPLE"
	if got, n := more.String(text); got != "[REDACTED:ticket] [REDACTED:mine] [REDACTED:aws_access_key_id]" || n != 3 {
		t.Errorf("with: %q (%d)", got, n)
	}
	if got, n := base.String(text); got != "[REDACTED:ticket] hunter2-secret [REDACTED:aws_access_key_id]" || n != 2 {
		t.Errorf("base after With: %q (%d)", got, n)
	}
	if len(more.Rules()) != len(base.Rules())+1 || more.Hold() != base.Hold() {
		t.Errorf("rules %v, hold %d (base %d)", more.Rules(), more.Hold(), base.Hold())
	}
	var out bytes.Buffer
	st := more.Stream(func(b []byte) { out.Write(b) })
	for _, c := range []byte(text) {
		st.Write([]byte{c})
	}
	st.Flush()
	if got, _ := more.String(text); out.String() != got {
		t.Errorf("streamed %q, whole %q", out.String(), got)
	}
	if r, err := (*Redactor)(nil).With(nil); r != nil || err != nil {
		t.Errorf("nil with nothing: %v, %v", r, err)
	}
	if _, err := base.With([]Rule{{Name: "ticket", Pattern: "x"}}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("a taken name: %v", err)
	}
	many := make([]Rule, MaxRules-len(base.Rules())+1)
	for i := range many {
		many[i] = Rule{Name: "r" + strings.Repeat("x", i), Pattern: "y"}
	}
	if _, err := base.With(many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too many: %v", err)
	}
}

// A match cut across chunks at every position is redacted whole, and the
// stream holds back no more than it must.
func TestStreamAcrossChunks(t *testing.T) {
	r := mustNew(t, Sets())
	text := "log: key=AKIAIOSFODNN7EXAMPLE at 10.0.0.1 in /home/u/x.txt\n" + pemKey + "\nbye Bearer abcdefghijkl\n"
	want, wantN := r.String(text)
	for cut := 1; cut < len(text); cut++ {
		var out bytes.Buffer
		s := r.Stream(func(b []byte) { out.Write(b) })
		s.Write([]byte(text[:cut]))
		s.Write([]byte(text[cut:]))
		s.Flush()
		if out.String() != want || s.Count() != wantN {
			t.Fatalf("cut at %d: %q (%d)\nwant %q (%d)", cut, out.String(), s.Count(), want, wantN)
		}
	}
	// Plain text beyond the hold is passed on before the end.
	var out bytes.Buffer
	s := r.Stream(func(b []byte) { out.Write(b) })
	s.Write(bytes.Repeat([]byte("x"), 2*r.Hold()))
	if out.Len() < r.Hold()-10 {
		t.Errorf("passed on %d bytes of %d, hold %d", out.Len(), 2*r.Hold(), r.Hold())
	}
	if r.Hold() > 9000 {
		t.Errorf("hold %d: the built-in sets should need less than 9000 bytes", r.Hold())
	}
	// Output without the rules' literals is passed on at once, but for
	// the few bytes a match could still start in (a literal may follow).
	out.Reset()
	s = r.Stream(func(b []byte) { out.Write(b) })
	line := "epoch 12 done, loss went down nicely; now waiting for the next batch\n"
	s.Write([]byte(line))
	if out.Len() < len(line)-80 {
		t.Errorf("passed on %q of %q at once", out.String(), line)
	}
	s.Flush()
	if out.String() != line {
		t.Errorf("%q, want %q", out.String(), line)
	}
}

// sample is output of the usual kind: prose, numbers, a traceback, a
// few secrets.
func sample(n int) []byte {
	para := `Traceback (most recent call last):
  File "/usr/lib/python3.11/json/decoder.py", line 337, in decode
    obj, end = self.raw_decode(s, idx=_w(s, 0).end())
epoch 12: loss=0.2345 acc=0.9123 lr=0.001 took 1.23s on 10.0.0.7
connecting with password=hunter2 token: abc Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig
The quick brown fox jumps over the lazy dog; key points: 1, 2, 3.
`
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(para)
	}
	return b.Bytes()[:n]
}

func BenchmarkRedact(b *testing.B) {
	text := sample(1 << 20)
	for _, sets := range [][]string{{Credentials}, {HostPaths}, {IPAddresses}, Sets()} {
		r := mustNew(b, sets)
		name := strings.Join(sets, "+")
		b.Run(name+"/whole", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				r.Bytes(text)
			}
		})
		b.Run(name+"/stream4K", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				s := r.Stream(func([]byte) {})
				for at := 0; at < len(text); at += 4096 {
					s.Write(text[at:min(at+4096, len(text))])
				}
				s.Flush()
			}
		})
	}
}

// A rule whose literal a window lacks is left out of that window's
// search: sound only if no match can lack it, so (?i)'s non-ASCII folds
// (the long s, the Kelvin sign) count as their ASCII letters.
func TestStreamFarLiterals(t *testing.T) {
	r := mustNew(t, []string{Credentials})
	text := "pa\u017f\u017fword=hunter2 " + strings.Repeat("filler ", 4000) + " token"
	want, n := r.String(text)
	var out bytes.Buffer
	s := r.Stream(func(b []byte) { out.Write(b) })
	for at := 0; at < len(text); at += 1000 {
		s.Write([]byte(text[at:min(at+1000, len(text))]))
	}
	s.Flush()
	if out.String() != want || s.Count() != n || n != 1 {
		t.Errorf("streamed %d matches, whole %d: differ", s.Count(), n)
	}
}

// Every string of a JSON document is redacted, keys too; numbers and a
// document with no match are kept as they are.
func TestJSON(t *testing.T) {
	r := mustNew(t, []string{"credentials"})
	for _, c := range []struct {
		in, want string
		n        int
	}{
		{`"AKIAIOSFODNN7EXAMPLE"`, `"[REDACTED:aws_access_key_id]"`, 1},
		{`{"a": [1.50, "x AKIAIOSFODNN7EXAMPLE", {"AKIAIOSFODNN7EXAMPLE": true}]}`, `{"a":[1.50,"x [REDACTED:aws_access_key_id]",{"[REDACTED:aws_access_key_id]":true}]}`, 2},
		{`{"b": 12345678901234567890, "c": "<b>"}`, `{"b": 12345678901234567890, "c": "<b>"}`, 0},
		{`not json AKIAIOSFODNN7EXAMPLE`, `not json AKIAIOSFODNN7EXAMPLE`, 0},
	} {
		got, n := r.JSON([]byte(c.in))
		if string(got) != c.want || n != c.n {
			t.Errorf("JSON(%s) = %s, %d; want %s, %d", c.in, got, n, c.want, c.n)
		}
	}
	var nilR *Redactor
	if got, n := nilR.JSON([]byte(`"AKIAIOSFODNN7EXAMPLE"`)); string(got) != `"AKIAIOSFODNN7EXAMPLE"` || n != 0 {
		t.Errorf("nil redactor: %s %d", got, n)
	}
}
