package jailinit

import "os"

// SpawnerArg0 is argv[0] of a server's spawner: a small process, this
// binary re-executed, that clones sandbox inits on the server's behalf
// (see Spawner).
const SpawnerArg0 = "airlock-spawner"

// IsSpawner says whether this process is a server's spawner.
func IsSpawner() bool { return len(os.Args) > 0 && os.Args[0] == SpawnerArg0 }

// CloneMsg asks a spawner to start an init: the sealed executable (the
// spawner's fd 4) as InitArg0, with Env and these clone attributes, the
// same the host would give its own clone. Its descriptors, in order: the
// init's end of its control socket (its fd 3), the write end of its
// stderr, then (cgroup v2) the directory of the cgroup to clone it into,
// or (v1) the tasks files of that cgroup, which the cloning thread enters
// first. The reply is MsgCloned with the pid and its pidfd, or MsgError.
type CloneMsg struct {
	Env         []string `json:"env"`
	Cloneflags  uintptr  `json:"cloneflags"`
	UidMappings []IDMap  `json:"uid_mappings"`
	GidMappings []IDMap  `json:"gid_mappings"`
	// Setgroups is GidMappingsEnableSetgroups.
	Setgroups bool `json:"setgroups"`
	Setsid    bool `json:"setsid"`
	// Credential is what the init becomes in its user namespace before
	// it executes: uid, gid and supplementary groups (nil: unchanged).
	Credential *Credential `json:"credential,omitempty"`
	// IntoFD says the third descriptor is a cgroup v2 directory (clone3's
	// CLONE_INTO_CGROUP); otherwise the descriptors after the second are
	// v1 tasks files.
	IntoFD bool `json:"into_fd"`
}

// IDMap is one line of a uid_map or gid_map.
type IDMap struct {
	ContainerID int `json:"container_id"`
	HostID      int `json:"host_id"`
	Size        int `json:"size"`
}

// Credential is the uid, gid and groups of a clone.
type Credential struct {
	Uid    uint32   `json:"uid"`
	Gid    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
}
