package gvisor

import (
	"reflect"
	"testing"

	"airlock/internal/config"
)

// The OCI process of a gVisor program comes from the jail's sandbox entry
// (jail.ProcessEntry): the same user, no capability, no_new_privs and the
// same rlimits as the native jail's programs.
func TestProcessSpecFromTheEntry(t *testing.T) {
	l := config.DefaultLimits()
	l.NoFile = 321
	p, err := processSpec([]string{"/bin/true"}, []string{"A=b"}, "", l)
	if err != nil {
		t.Fatal(err)
	}
	want := ociProcess{
		User: ociUser{UID: 1000, GID: 1000},
		Args: []string{"/bin/true"}, Env: []string{"A=b"}, Cwd: "/workspace",
		Capabilities: map[string][]string{
			"bounding": {}, "effective": {}, "inheritable": {}, "permitted": {}, "ambient": {},
		},
		Rlimits: []ociRlimit{
			{Type: "RLIMIT_NOFILE", Hard: 321, Soft: 321},
			{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			{Type: "RLIMIT_STACK", Hard: 8 << 20, Soft: 8 << 20},
			{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
			{Type: "RLIMIT_MSGQUEUE", Hard: 0, Soft: 0},
		},
		NoNewPrivileges: true,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("process:\n got %+v\nwant %+v", p, want)
	}
	if p, _ := processSpec([]string{"x"}, nil, "/", l); p.Cwd != "/" {
		t.Errorf("cwd %q, want the one asked for", p.Cwd)
	}
}
