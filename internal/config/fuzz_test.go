package config

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode"
)

// FuzzLimitsDecode decodes whole limit objects as API requests carry them
// and resolves them: a resolved result always lies within the maxima, and
// marshalling, decoding and resolving it again gives it back unchanged.
func FuzzLimitsDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"memory":"1G","pids":64}`, `{"cpus":0.5,"timeout":"2s"}`, `{"cpus":1e308}`,
		`{"memory":-1}`, `{"nofile":1.5}`, `{"disk":"8G","inodes":1048576}`, `{"x":1}`, `{"cpu_time":1e-9}`,
		`{"timeout":"1.5s","cpu_time":0.25,"memory":"1.5G","max_output":"1000","cpus":0.3,"nofile":"77","inodes":100,"pids":9,"disk":12345678}`} {
		f.Add([]byte(s))
	}
	def, max := DefaultLimits(), DefaultMaxLimits()
	f.Fuzz(func(t *testing.T, b []byte) {
		var req Limits
		if err := Decode(b, &req); err != nil {
			return
		}
		l, err := Resolve(req, def, max)
		if err != nil {
			return
		}
		if l.Timeout > max.Timeout || l.CPUTime > max.CPUTime || l.Memory > max.Memory || l.Pids > max.Pids ||
			l.Disk > max.Disk || l.Inodes > max.Inodes || l.MaxOutput > max.MaxOutput || !(l.CPUs <= max.CPUs) ||
			l.NoFile > max.NoFile {
			t.Fatalf("%s resolved to %+v, beyond the maxima", b, l)
		}
		if l.Memory < minMemory || l.Pids < minPids || !(l.CPUs >= minCPUs) || l.Timeout <= 0 || l.CPUTime <= 0 {
			t.Fatalf("%s resolved to %+v, below the floors", b, l)
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Limits
		if err := Decode(out, &back); err != nil {
			t.Fatalf("%s resolved to %+v, marshalled as %s, which does not decode: %v", b, l, out, err)
		}
		again, err := Resolve(back, def, max)
		if err != nil || again != l {
			t.Fatalf("%s resolved to %+v, marshalled as %s, resolved again as %+v, %v", b, l, out, again, err)
		}
	})
}

// FuzzConfigFile reads configuration files key by key (decodeKeys, which
// names the key of every problem) and checks it against encoding/json's
// strict decoding: whatever decodeKeys accepts, json accepts with the
// same result, and whatever json refuses, decodeKeys refuses (keys match
// exactly where json also takes them in another case).
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{`{}`, `{"server": {"listen": "127.0.0.1:1", "max_sessions": 3}}`, `{"pool": {"size": {"python": 1}}}`,
		`{"tenants": {"a": {"redaction": {"rules": [{"name": "n", "pattern": "p"}]}, "isolation": "gvisor"}}}`,
		`{"code_rules": [{"name": "n", "pattern": "p", "action": "flag"}]}`, `{"quotas": {"max_limits": {"memory": "1G"}}}`,
		`{"server": null}`, `{"server": {"listn": 1}}`, `{"pool": {"size": null}}`, `{"max": {"memory": "1G"}} {}`, `[]`, `{"id_base": -1}`,
		`{"tenants": {"a": null}}`, `{"network": {"allow_only": ["a.b"], "bytes": "1G"}}`, `{"Server": {}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		walked, byJSON := Default(), Default()
		errWalk := decodeKeys(b, reflect.ValueOf(&walked).Elem(), "")
		errJSON := Decode(b, &byJSON)
		switch {
		case errWalk == nil && errJSON != nil:
			t.Fatalf("%s: decodeKeys accepted what json refuses: %v", b, errJSON)
		case errWalk == nil && !reflect.DeepEqual(walked, byJSON):
			t.Fatalf("%s: decodeKeys gave %+v, json %+v", b, walked, byJSON)
		case errWalk != nil && errJSON == nil && !foldedKey(b):
			t.Fatalf("%s: decodeKeys refused what json accepts: %v", b, errWalk)
		}
	})
}

// foldedKey reports whether b has a key json would match in another case
// (decodeKeys takes keys as written only) or a null decodeKeys reads
// differently from json.
func foldedKey(b []byte) bool {
	return bytes.ContainsFunc(b, unicode.IsUpper) || bytes.Contains(b, []byte("\\u")) || bytes.ContainsRune(b, '\u017f') || bytes.ContainsRune(b, '\u212a')
}
