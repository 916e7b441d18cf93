package cgroup

import (
	"slices"
	"testing"
)

// A thread's v1 cgroups resolve under the hierarchies' mounts, also when a
// mount shows a subtree only (a container on v1 without a cgroup namespace
// of its own sees host paths in /proc/self/cgroup): the mount's root is
// cut from the path, as libcontainer does; a path outside it is refused.
func TestV1ThreadDirs(t *testing.T) {
	mnts := map[string]string{"memory": "/sys/fs/cgroup/memory"}
	for _, tc := range []struct {
		own, root string
		want      string // "": refused
	}{
		{"/", "/", "/sys/fs/cgroup/memory"},
		{"/srv/airlock", "/", "/sys/fs/cgroup/memory/srv/airlock"},
		{"/srv/airlock", "", "/sys/fs/cgroup/memory/srv/airlock"},
		{"/docker/abc", "/docker/abc", "/sys/fs/cgroup/memory"},
		{"/docker/abc/sub", "/docker/abc", "/sys/fs/cgroup/memory/sub"},
		{"/docker/abcd", "/docker/abc", ""},
		{"/other", "/docker/abc", ""},
		{"/a/../b", "/", ""},
	} {
		got, err := v1ThreadDirs(map[string]string{"memory": tc.own}, mnts, map[string]string{"memory": tc.root})
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q under root %q: %v, want a refusal", tc.own, tc.root, got)
		case tc.want != "" && (err != nil || !slices.Equal(got, []string{tc.want})):
			t.Errorf("%q under root %q: %v, %v; want %s", tc.own, tc.root, got, err, tc.want)
		}
	}
	if _, err := v1ThreadDirs(map[string]string{}, mnts, nil); err == nil {
		t.Error("a hierarchy the thread is not listed in must be refused")
	}
}
