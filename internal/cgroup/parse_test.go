package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

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

// The memory limit pools size themselves from is the lowest set on the
// way, whatever the level; "max", v1's unlimited value, a missing or
// unreadable file and a directory outside the hierarchy set none.
func TestLowestLimit(t *testing.T) {
	root := t.TempDir()
	pod := filepath.Join(root, "kubepods", "pod1")
	parent := filepath.Join(pod, "airlock")
	server := filepath.Join(pod, "airlock-server")
	for _, d := range []string{parent, server} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dir, v string) {
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs := func() []string { return append(ancestors(parent, root), ancestors(server, root)...) }
	if got := ancestors(parent, root); !slices.Equal(got, []string{parent, pod, filepath.Dir(pod), root}) {
		t.Fatalf("ancestors: %v", got)
	}
	if got := ancestors("/elsewhere/x", root); got != nil {
		t.Fatalf("ancestors outside the hierarchy: %v", got)
	}
	if got := ancestors(root+"x/y", root); got != nil {
		t.Fatalf("a sibling of the root taken for under it: %v", got)
	}
	for _, c := range []struct {
		name string
		set  func()
		want int64
	}{
		{"none set", func() {}, 0},
		{"max everywhere", func() { write(parent, "max"); write(pod, "max"); write(root, "max") }, 0},
		{"v1's unlimited", func() { write(pod, "9223372036854771712") }, 0},
		{"the pod's", func() { write(pod, "2147483648") }, 2 << 30},
		{"a lower one on the parent", func() { write(parent, "1073741824") }, 1 << 30},
		{"a lower one on the server's own", func() { write(server, "536870912") }, 512 << 20},
		{"a higher one above changes nothing", func() { write(root, "17179869184") }, 512 << 20},
		{"garbage is none", func() { write(server, "lots") }, 1 << 30},
	} {
		c.set()
		if got := lowestLimit(dirs(), "memory.max"); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// A process's PSS is its smaps_rollup's Pss line, in bytes.
func TestParsePss(t *testing.T) {
	rollup := "55d4c000-7ffd1000 ---p 00000000 00:00 0  [rollup]\nRss:               12345 kB\nPss:                4321 kB\nPss_Anon:           1000 kB\n"
	if got := parsePss(rollup); got != 4321<<10 {
		t.Fatalf("parsePss: %d, want %d", got, 4321<<10)
	}
	for _, s := range []string{"", "Rss: 10 kB\n", "Pss: x kB\n"} {
		if got := parsePss(s); got != 0 {
			t.Errorf("parsePss(%q) = %d, want 0", s, got)
		}
	}
}
