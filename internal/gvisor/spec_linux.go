package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/jailinit"
	"airlock/internal/rootfs"
)

// The OCI runtime spec, as much of it as airlock writes.
type ociSpec struct {
	Version  string     `json:"ociVersion"`
	Process  ociProcess `json:"process"`
	Root     ociRoot    `json:"root"`
	Hostname string     `json:"hostname"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
}

type ociProcess struct {
	Terminal        bool                `json:"terminal"`
	User            ociUser             `json:"user"`
	Args            []string            `json:"args"`
	Env             []string            `json:"env"`
	Cwd             string              `json:"cwd"`
	Capabilities    map[string][]string `json:"capabilities"`
	Rlimits         []ociRlimit         `json:"rlimits"`
	NoNewPrivileges bool                `json:"noNewPrivileges"`
}

type ociUser struct {
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	CgroupsPath string         `json:"cgroupsPath"`
	// Resources stay empty: the cgroup is airlock's, made before runsc
	// runs, and runsc leaves a cgroup it did not make as it finds it.
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// processSpec is a program run as the sandbox user, entered as
// jail.ProcessEntry says (the sandbox entry of every airlock runtime, made
// here by runsc from the OCI process): no capabilities at all,
// no_new_privs, the sandbox user and no other group, the same rlimits as
// the native jail's programs. A step runsc cannot be told to make is an
// error, never skipped.
func processSpec(argv, env []string, dir string, l config.Limits) (ociProcess, error) {
	e, err := jail.ProcessEntry(l)
	if err != nil {
		return ociProcess{}, err
	}
	p := ociProcess{
		Args: argv, Env: env, Cwd: dir,
		// runsc gives the process exactly the capabilities listed here.
		Capabilities: map[string][]string{
			"bounding": {}, "effective": {}, "inheritable": {}, "permitted": {}, "ambient": {},
		},
	}
	for _, s := range e.Steps {
		switch s.Op {
		case jailinit.OpRlimit:
			name := jail.RlimitName(s.Resource)
			if name == "" {
				return ociProcess{}, fmt.Errorf("gvisor: entry: rlimit %d has no OCI name", s.Resource)
			}
			p.Rlimits = append(p.Rlimits, ociRlimit{Type: name, Hard: s.Max, Soft: s.Cur})
		case jailinit.OpCapBoundingDrop, jailinit.OpCapAmbientClear, jailinit.OpCapInheritableClear, jailinit.OpCapClear:
			// The empty sets above.
		case jailinit.OpNoNewPrivs:
			p.NoNewPrivileges = true
		case jailinit.OpSetgroups:
			// An OCI user has no additional gids unless listed.
		case jailinit.OpSetGID:
			p.User.GID = uint32(s.ID)
		case jailinit.OpSetUID:
			p.User.UID = uint32(s.ID)
		case jailinit.OpChdir:
			if p.Cwd == "" {
				p.Cwd = s.Path
			}
		case jailinit.OpSetsid, jailinit.OpDumpable:
			// runsc starts every process in a session of its own, by exec.
		default:
			return ociProcess{}, fmt.Errorf("gvisor: entry step %s cannot be made by runsc", s.Op)
		}
	}
	return p, nil
}

// writeBundle writes the sandbox's OCI bundle: the root template read
// only, /usr and the host's /etc trees read only, airlock's tmpfs mounts
// on /workspace and /tmp, a private /dev/shm, and an init that says it
// runs and then only waits for the server to go (programs come with
// `runsc exec`).
func (s *Sandbox) writeBundle() error {
	l := s.spec.Limits
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + itoa(min(int64(l.Disk), 64<<20))}},
	}
	root := s.root()
	if root.Image != "" {
		// A template's trees (checked to be directories when the root was
		// prepared; the store never changes a version once made).
		for _, b := range root.ImageBinds {
			mounts = append(mounts, ociMount{Destination: "/" + b, Type: "bind", Source: filepath.Join(root.Image, b), Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	} else {
		mounts = append(mounts, ociMount{Destination: "/usr", Type: "bind", Source: "/usr", Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		for _, name := range root.EtcBind {
			src := filepath.Join("/etc", name)
			if st, err := os.Stat(src); err == nil && st.IsDir() {
				mounts = append(mounts, ociMount{Destination: src, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
			}
		}
	}
	mounts = append(mounts,
		ociMount{Destination: "/tmp", Type: "bind", Source: filepath.Join(s.dir, "tmp"), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		ociMount{Destination: "/workspace", Type: "bind", Source: filepath.Join(s.dir, "workspace"), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		ociMount{Destination: rootfs.HomeAlias, Type: "bind", Source: filepath.Join(s.dir, "workspace"), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
	)
	// The init says it runs, then waits for the end of its fd 3 (the
	// server's life pipe: see Start). It is bash because bash reaps every
	// child on SIGCHLD, orphans it inherits included: programs are started
	// beside it (runsc exec), and what they leave behind when they die
	// (a killed command's background jobs) is reparented to it.
	init, err := processSpec([]string{"/usr/bin/bash", "--noprofile", "--norc", "-c", initScript}, []string{"PATH=/usr/bin:/bin"}, "/", l)
	if err != nil {
		return err
	}
	// Not the sandbox user: code cannot signal the init (kill(1, SIGKILL)
	// would end the sandbox), as in the native jail, whose init is root.
	init.User.UID, init.User.GID = initID, initID
	if s.keeper != "" {
		// The keeper starts every program, as root inside gVisor with
		// only what dropping to the program's user and limits takes (see
		// entryMain); its binary is the host's copy, read-only.
		init.Args = []string{keeperPath, keeperArg, "init"}
		init.User.UID, init.User.GID = 0, 0
		init.NoNewPrivileges = false
		caps := []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_RESOURCE"}
		init.Capabilities = map[string][]string{"bounding": caps, "effective": caps, "permitted": caps, "inheritable": {}, "ambient": {}}
		mounts = append(mounts, ociMount{Destination: keeperPath, Type: "bind", Source: s.keeper, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	spec := ociSpec{
		Version:  "1.0.2",
		Process:  init,
		Root:     ociRoot{Path: root.Template, Readonly: true},
		Hostname: root.Hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: []ociNamespace{{Type: "pid"}, {Type: "network", Path: s.netnsPath()}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			// Relative to each hierarchy's root, like airlock's own.
			CgroupsPath: "/" + filepath.Join(s.h.opts.CgroupParent, s.spec.Name),
		},
	}
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	bundle := filepath.Join(s.dir, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
}

// root is the sandbox's root spec: a template's, or the host's.
func (s *Sandbox) root() rootfs.Spec {
	if s.spec.Root != nil {
		return s.spec.Root.Spec()
	}
	return s.h.root
}

// netnsPath names the sandbox's network namespace for runsc: the handle
// airlock holds, through /proc (nothing to unmount after a crash); empty
// (a new one) without.
func (s *Sandbox) netnsPath() string {
	if s.netns == nil {
		return ""
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), s.netns.Fd())
}

// initID is the uid and gid of a gVisor sandbox's init: nobody.
const initID = 65534

// initScript: a background read waits for the end of fd 3 while the init
// itself sits in wait, which reaps every child that ends, orphans
// reparented to the init included (bash ignores pids it did not start).
const initScript = `echo
read -r x <&3 &
wait
exit 0`

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
