// Package rootfs owns the sandbox's root filesystem: what it contains (the
// host's /usr read-only, a generated minimal /etc, a minimal /dev, a fresh
// /proc with sensitive entries masked, size-limited tmpfs scratch space)
// and building it inside a new mount namespace, then pivot_root into it
// with the old root detached.
//
// Build runs in the sandbox's init, inside its new user and mount
// namespaces, before any sandboxed code exists. It must never mount
// anything writable other than the scratch trees, never leave a mount
// without nosuid, and never keep a reference to the host's root.
package rootfs

import (
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
)

// Spec is everything Build needs. It is sent from the host to the init.
type Spec struct {
	// Staging is an empty host directory to mount the new root on
	// (inside the private mount namespace, so the host never sees it).
	Staging string `json:"staging"`
	// Hostname of the sandbox.
	Hostname string `json:"hostname"`
	// UID and GID of the sandbox user inside; it owns /workspace.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Disk is the size of /workspace and of /tmp; Inodes their file counts.
	Disk   int64 `json:"disk"`
	Inodes int64 `json:"inodes"`
	// Shm is the size of /dev/shm.
	Shm int64 `json:"shm"`
	// Ptys caps the pseudo-terminals of the sandbox's devpts instance
	// (0: the kernel's pty.max).
	Ptys int `json:"ptys,omitempty"`
	// Etc are generated files under /etc (name -> content).
	Etc map[string]string `json:"etc"`
	// EtcCopy are host /etc files copied in when they exist.
	EtcCopy []string `json:"etc_copy"`
	// EtcBind are host /etc directories bound read-only when they exist.
	EtcBind []string `json:"etc_bind"`
	// Files are extra read-only files placed in the root (absolute path
	// -> content), such as the in-sandbox runtimes; one that starts with
	// "#!" is a script, and executable.
	Files map[string]string `json:"files"`
	// LoadFiles, when set, gives more files like Files, read only when
	// PrepareTemplate makes a template: FilesKey stands for their
	// content in its name (the binary's build ID, for the files embedded
	// in it), so that finding the template reads and hashes none of
	// them. Files wins over them on the same path. Neither is sent.
	LoadFiles func() map[string]string `json:"-"`
	FilesKey  string                   `json:"-"`
	// TmpCopy are host directories whose regular files are copied into
	// /tmp/<name>, owned by the sandbox user (the matplotlib font cache).
	TmpCopy map[string]string `json:"tmp_copy"`
	// Template, when set, is a host directory made by PrepareTemplate
	// that holds the static part of the root (then Etc, EtcCopy and Files
	// are already in it and need not be sent).
	Template string `json:"template,omitempty"`
	// NoProc leaves /proc empty: for a template process that runs in the
	// host's pid namespace and has no business seeing it.
	NoProc bool `json:"no_proc,omitempty"`
	// Prepare, when set, finishes a new template in root (the directory
	// that becomes it) before anything uses it: the runtimes' compiled
	// bytecode, say. PrepareKey names what its result depends on, so that
	// a template is made again when that changes. Neither is sent.
	Prepare    func(root string) error `json:"-"`
	PrepareKey string                  `json:"-"`
	// Image, when set, is the host directory of a template's root
	// filesystem (see ForImage): the sandbox sees its trees instead of
	// the host's /usr and /etc.
	Image string `json:"image,omitempty"`
	// ImageBinds are the directories of Image bound read-only at the
	// same place in the sandbox ("usr", "lib" when it is a directory,
	// "opt/conda"...).
	ImageBinds []string `json:"image_binds,omitempty"`
	// ImageLinks are Image's top-level symlinks ("bin" -> "usr/bin"),
	// made the same in the sandbox's root.
	ImageLinks map[string]string `json:"image_links,omitempty"`
	// ImageTrees are detached mounts of ImageBinds (in order) that the
	// host made (OpenImageTrees) and passes to the init with the spec:
	// the init never resolves a host path of the store itself (it could
	// not: the store's parents are the host root's), it only attaches
	// them.
	ImageTrees []*os.File `json:"-"`
}

// Sandbox user identity inside every sandbox.
const (
	UserName = "user"
	UserID   = 1000
	GroupID  = 1000
	Home     = "/workspace"
	// HomeAlias is the same directory as Home under E2B's name for it:
	// code written for E2B opens /home/user/... unchanged.
	HomeAlias = "/home/user"
)

// DefaultSpec returns the standard layout; the caller fills in sizes.
func DefaultSpec(staging, hostname string) Spec {
	return Spec{
		Staging:  staging,
		Hostname: hostname,
		UID:      UserID,
		GID:      GroupID,
		Etc:      GeneratedEtc(hostname),
		EtcCopy:  []string{"ld.so.cache", "protocols", "services", "mime.types", "ethertypes", "rpc"},
		EtcBind:  []string{"ssl/certs", "fonts", "alternatives", "python3", "python3.11", "python3.12", "python3.13"},
	}
}

// GeneratedEtc is the generated part of /etc. Nothing here comes from the
// host: the host's users, hosts and resolver are none of the sandbox's
// business.
func GeneratedEtc(hostname string) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\n%s:x:%d:%d:sandbox user:%s:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			UserName, UserID, GroupID, Home),
		"group":    fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", UserName, GroupID),
		"hosts":    fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", hostname),
		"hostname": hostname + "\n",
		// No nameserver line: resolvers ask 127.0.0.1:53, where only a
		// session with a network policy has airlock's DNS; without one
		// the kernel refuses the datagram at once (nothing listens).
		"resolv.conf":   "# airlock: the sandbox has loopback networking only\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n",
		"matplotlibrc":  "backend: Agg\n",
		"shells":        "/bin/sh\n/bin/bash\n/usr/bin/bash\n",
		"os-release":    "NAME=\"airlock sandbox\"\nID=airlock\n",
	}
}

// Validate rejects specs that could place files outside the new root.
func (s Spec) Validate() error {
	check := func(what, p string, abs bool) error {
		if p == "" || strings.Contains(p, "\x00") {
			return fmt.Errorf("rootfs: %s %q", what, p)
		}
		if abs != strings.HasPrefix(p, "/") {
			return fmt.Errorf("rootfs: %s %q must be %s", what, p, map[bool]string{true: "absolute", false: "relative"}[abs])
		}
		for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
			if part == "" || part == "." || part == ".." {
				return fmt.Errorf("rootfs: %s %q is not clean", what, p)
			}
		}
		return nil
	}
	if err := check("staging", s.Staging, true); err != nil {
		return err
	}
	if s.Template != "" {
		if err := check("template", s.Template, true); err != nil {
			return err
		}
	}
	if s.Image != "" {
		if err := check("image", s.Image, true); err != nil {
			return err
		}
	}
	for _, b := range s.ImageBinds {
		if err := check("image bind", b, false); err != nil {
			return err
		}
		if s.Image == "" {
			return fmt.Errorf("rootfs: image bind %q without an image", b)
		}
	}
	for name, target := range s.ImageLinks {
		if err := check("image link", name, false); err != nil {
			return err
		}
		if strings.Contains(name, "/") || target == "" || strings.Contains(target, "\x00") {
			return fmt.Errorf("rootfs: image link %q -> %q", name, target)
		}
	}
	for name := range s.Etc {
		if err := check("etc file", name, false); err != nil {
			return err
		}
	}
	for _, name := range append(append([]string{}, s.EtcCopy...), s.EtcBind...) {
		if err := check("etc entry", name, false); err != nil {
			return err
		}
	}
	for p := range s.Files {
		if err := check("file", p, true); err != nil {
			return err
		}
		if !strings.HasPrefix(p, "/opt/") {
			return fmt.Errorf("rootfs: extra file %q must be under /opt", p)
		}
	}
	for name, dir := range s.TmpCopy {
		if err := check("tmp copy", name, false); err != nil {
			return err
		}
		if err := check("tmp copy source", dir, true); err != nil {
			return err
		}
	}
	if s.Disk <= 0 || s.Inodes <= 0 || s.Shm <= 0 {
		return fmt.Errorf("rootfs: sizes must be positive")
	}
	return nil
}

// sortedKeys returns the keys of m in order, so that builds are
// deterministic.
func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// MaskedFiles are /proc files replaced by an empty, unreadable view.
var MaskedFiles = []string{"kcore", "keys", "key-users", "latency_stats", "timer_list", "timer_stats", "sched_debug", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "config.gz", "vmallocinfo", "pagetypeinfo", "slabinfo", "sysrq-trigger"}

// MaskedDirs are /proc directories hidden behind an empty read-only tmpfs.
var MaskedDirs = []string{"acpi", "asound", "scsi", "firmware", "driver", "tty"}

// ReadOnlyProc are /proc entries made read-only.
var ReadOnlyProc = []string{"sys", "bus", "fs", "irq"}

// Devices are the host device nodes bound into /dev.
var Devices = []string{"null", "zero", "full", "random", "urandom"}

// AllFiles are Files over what LoadFiles gives (read now).
func (s Spec) AllFiles() map[string]string {
	if s.LoadFiles == nil {
		return s.Files
	}
	files := maps.Clone(s.LoadFiles())
	if files == nil {
		files = map[string]string{}
	}
	maps.Copy(files, s.Files)
	return files
}
