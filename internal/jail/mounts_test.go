package jail

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"airlock/internal/rootfs"
)

// mountProbe reports the sandbox's mount table and what its masked /proc
// entries look like from inside.
const mountProbe = `
import json, os, stat, sys
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    sep = f.index("-")
    mounts.append({"root": f[3], "point": f[4], "opts": f[5].split(","), "fstype": f[sep + 1]})
masked = {}
for name in json.loads(sys.argv[1]):
    p = "/proc/" + name
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        continue
    kind = "chr %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else oct(st.st_mode)
    try:
        with open(p, "rb") as fh:
            data = len(fh.read(100))
    except OSError as e:
        data = "err %d" % e.errno
    masked[name] = [kind, data]
dirs = {}
for name in json.loads(sys.argv[2]):
    try:
        dirs[name] = os.listdir("/proc/" + name)
    except FileNotFoundError:
        continue
print(json.dumps({"mounts": mounts, "masked": masked, "dirs": dirs, "sys": os.path.lexists("/sys")}))
print("DONE")
`

func TestRootMounts(t *testing.T) {
	h := testHost(t)
	res := runPythonArgs(t, h, testLimits(), mountProbe, jsonArg(t, rootfs.MaskedFiles), jsonArg(t, rootfs.MaskedDirs))
	mustFinish(t, res)
	var got struct {
		Mounts []struct {
			Root, Point, FSType string
			Opts                []string
		}
		Masked map[string][2]any
		Dirs   map[string][]string
		Sys    bool
	}
	if err := json.Unmarshal([]byte(linesWith(res.Stdout, "{")[0]), &got); err != nil {
		t.Fatal(err)
	}
	writable := map[string]bool{"/workspace": true, rootfs.HomeAlias: true, "/tmp": true, "/dev/shm": true, "/proc": true, "/dev/pts": true}
	devices := map[string]bool{}
	for _, d := range rootfs.Devices {
		writable["/dev/"+d] = true
		devices["/"+d] = true
	}
	seen := map[string]bool{}
	for _, m := range got.Mounts {
		seen[m.Point] = true
		has := func(o string) bool { return slices.Contains(m.Opts, o) }
		if !has("nosuid") {
			t.Errorf("%s is mounted without nosuid: %v", m.Point, m.Opts)
		}
		if !has("ro") && !writable[m.Point] {
			t.Errorf("%s is writable: %v", m.Point, m.Opts)
		}
		// Only bind mounts of the device nodes (including the /proc
		// masks, which are /dev/null) keep device semantics.
		if !has("nodev") && !(m.FSType == "devtmpfs" && devices[m.Root]) && !(m.FSType == "devpts" && m.Point == "/dev/pts") {
			t.Errorf("%s is mounted without nodev: %v (%s %s)", m.Point, m.Opts, m.FSType, m.Root)
		}
		// /tmp and /dev/shm are executable like /workspace (see rootfs).
		if (m.Point == "/proc" || m.Point == "/dev" || m.Point == "/dev/pts") && !has("noexec") {
			t.Errorf("%s is mounted without noexec: %v", m.Point, m.Opts)
		}
		// Host filesystems appear only as the trees the spec binds: /usr,
		// directories of /etc, and the read-only root template the host
		// wrote under its state directory.
		switch m.FSType {
		case "tmpfs", "proc", "devtmpfs", "devpts":
		default:
			template := m.Point == "/" && strings.Contains(m.Root, "/airlock-test/rootfs-")
			if m.Root != "/usr" && !strings.HasPrefix(m.Root, "/etc/") && !template {
				t.Errorf("host tree %s of a %s filesystem is mounted on %s", m.Root, m.FSType, m.Point)
			}
		}
	}
	for _, p := range []string{"/", "/usr", "/workspace", rootfs.HomeAlias, "/tmp", "/dev", "/dev/shm", "/dev/pts", "/proc", "/proc/sys"} {
		if !seen[p] {
			t.Errorf("no mount on %s", p)
		}
	}
	for _, m := range got.Mounts {
		if m.Point == "/" && !slices.Contains(m.Opts, "ro") {
			t.Errorf("the root is writable: %v", m.Opts)
		}
	}
	if got.Sys {
		t.Error("/sys exists in the sandbox")
	}
	for name, v := range got.Masked {
		if v[0] != "chr 1:3" || v[1] != float64(0) {
			t.Errorf("/proc/%s is not masked with an empty null device: %v", name, v)
		}
	}
	for name, ents := range got.Dirs {
		if len(ents) != 0 {
			t.Errorf("/proc/%s is not masked: %v", name, ents)
		}
	}
}
