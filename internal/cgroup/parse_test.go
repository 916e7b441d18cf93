package cgroup

import "testing"

// A flat-keyed counter file is read by key, whatever its place; a key
// that is only a prefix of another is not taken for it.
func TestParseKeyed(t *testing.T) {
	for _, c := range []struct {
		s, key string
		want   uint64
	}{
		{"usage_usec 1200\nuser_usec 800\nsystem_usec 400\n", "usage_usec", 1200},
		{"usage_usec 1200\nuser_usec 800\nsystem_usec 400\n", "system_usec", 400},
		{"max 7", "max", 7},
		{"maxx 9\nmax 3\n", "max", 3},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill", 2},
		{"low 0\nhigh 0\n", "oom_kill", 0},
		{"", "max", 0},
	} {
		got, err := parseKeyed(c.s, c.key)
		if err != nil || got != c.want {
			t.Errorf("parseKeyed(%q, %q) = %d, %v; want %d", c.s, c.key, got, err, c.want)
		}
	}
	if _, err := parseKeyed("max x\n", "max"); err == nil {
		t.Error("a value that is not a number was taken")
	}
}
