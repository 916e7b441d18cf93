package jail

// Escapes through system calls: namespaces, mounts, roots, devices,
// tracing, kernel interfaces, exotic sockets and ioctls. Every attempt is a
// raw syscall made with ctypes, so that no library wrapper hides what the
// kernel answered.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// syscallNumbers are the numbers the probe uses, from this architecture's
// table. syscallNumbersArch (per architecture) adds the rest.
func syscallNumbers() map[string]uintptr {
	m := map[string]uintptr{
		"chroot": unix.SYS_CHROOT, "mknodat": unix.SYS_MKNODAT, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
		"pivot_root": unix.SYS_PIVOT_ROOT, "fsopen": unix.SYS_FSOPEN, "open_tree": unix.SYS_OPEN_TREE,
		"move_mount": unix.SYS_MOVE_MOUNT, "mount_setattr": unix.SYS_MOUNT_SETATTR, "fspick": unix.SYS_FSPICK,
		"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "ptrace": unix.SYS_PTRACE,
		"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		"kcmp": unix.SYS_KCMP, "pidfd_open": unix.SYS_PIDFD_OPEN, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
		"pidfd_send_signal": unix.SYS_PIDFD_SEND_SIGNAL,
		"bpf":               unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER,
		"keyctl":            unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
		"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"reboot": unix.SYS_REBOOT, "syslog": unix.SYS_SYSLOG, "personality": unix.SYS_PERSONALITY,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "socket": unix.SYS_SOCKET, "ioctl": unix.SYS_IOCTL,
		"setuid": unix.SYS_SETUID, "setgid": unix.SYS_SETGID, "setgroups": unix.SYS_SETGROUPS,
		"sethostname": unix.SYS_SETHOSTNAME, "setdomainname": unix.SYS_SETDOMAINNAME,
		"acct": unix.SYS_ACCT, "swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF,
		"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME, "adjtimex": unix.SYS_ADJTIMEX,
		"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "quotactl": unix.SYS_QUOTACTL, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		"move_pages": unix.SYS_MOVE_PAGES, "migrate_pages": unix.SYS_MIGRATE_PAGES, "vhangup": unix.SYS_VHANGUP,
		"getpid": unix.SYS_GETPID,
	}
	for k, v := range syscallNumbersArch() {
		m[k] = v
	}
	return m
}

// syscallProbe runs every case and prints one JSON line per case:
// {"name", "ret", "errno"}.
const syscallProbe = `
import ctypes, json, os, signal, struct, sys, time
NR = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def arg(a):
    if isinstance(a, bool) or a is None:
        return ctypes.c_ulong(0)
    if isinstance(a, int):
        return ctypes.c_ulong(a & 0xffffffffffffffff)
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return a

def sc(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[arg(a) for a in args])
    return r, (ctypes.get_errno() if r == -1 else 0)

def raw(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    return r, (ctypes.get_errno() if r == -1 else 0)

def closing(res):
    # Close a descriptor a successful call returned.
    if res[0] >= 0:
        os.close(res[0])
    return res

def pyerr(fn):
    try:
        fn()
        return 0, 0
    except OSError as e:
        return -1, e.errno

buf = ctypes.create_string_buffer(4096)
AT_FDCWD = -100
CLONE = {"NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
         "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000, "NEWTIME": 0x80}
SIGCHLD = 17

def clone(flags):
    r, e = sc("clone", flags, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    return r, e

def clone3(flags):
    args = ctypes.create_string_buffer(88)
    struct.pack_into("<Q", args, 0, flags)
    struct.pack_into("<Q", args, 32, SIGCHLD)
    r, e = sc("clone3", args, 88)
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    return r, e

def child():
    pid = os.fork()
    if pid == 0:
        time.sleep(10)
        os._exit(0)
    return pid

def on_child(fn):
    pid = child()
    try:
        return fn(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

def traceme():
    pid = os.fork()
    if pid == 0:
        r, e = sc("ptrace", 0, 0, 0, 0)
        os._exit(e if r == -1 else 0)
    _, st = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(st)
    return (-1 if code else 0), code

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

def vm(name, pid):
    local = iovec(ctypes.cast(buf, ctypes.c_void_p), 16)
    remote = iovec(ctypes.cast(buf, ctypes.c_void_p), 16)
    return sc(name, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)

def setns(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return sc("setns", fd, 0)
    finally:
        os.close(fd)

def pidfd_getfd():
    pidfd, e = sc("pidfd_open", os.getpid(), 0)
    if pidfd < 0:
        return pidfd, e
    try:
        return closing(sc("pidfd_getfd", pidfd, 0, 0))
    finally:
        os.close(pidfd)

def pidfd_kill_init():
    pidfd, e = sc("pidfd_open", 1, 0)
    if pidfd < 0:
        return pidfd, e
    try:
        return sc("pidfd_send_signal", pidfd, signal.SIGKILL, 0, 0)
    finally:
        os.close(pidfd)

def open_by_handle():
    # The "shocker" escape: inode 2 of the root filesystem by handle.
    handle = ctypes.create_string_buffer(struct.pack("<Ii", 8, 1) + struct.pack("<Q", 2))
    mfd = os.open("/", os.O_RDONLY)
    try:
        return closing(sc("open_by_handle_at", mfd, handle, os.O_RDONLY))
    finally:
        os.close(mfd)

def chroot_dance():
    # The classic escape: chroot into a subdirectory while holding a
    # descriptor of the old root, fchdir back out, climb, chroot(".").
    os.makedirs("/tmp/cage", exist_ok=True)
    fd = os.open("/", os.O_RDONLY)
    r, e = sc("chroot", b"/tmp/cage")
    os.fchdir(fd)
    os.close(fd)
    for _ in range(32):
        os.chdir("..")
    r2, e2 = sc("chroot", b".")
    os.chdir("/workspace")
    if r == 0 or r2 == 0:
        return 0, 0
    return -1, e2

def perf():
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQ", attr, 0, 1, 128, 0)
    return closing(sc("perf_event_open", attr, 0, -1, -1, 0))

def mknod(path, mode, dev):
    r = sc("mknodat", AT_FDCWD, path.encode(), mode, dev)
    if r[0] == 0:
        os.unlink(path)
    return r

# Payloads that would do no harm even if a layer were missing: the current
# time, read-only adjtimex (modes 0), a module that does not exist.
def now_timeval():
    t = time.time()
    return ctypes.create_string_buffer(struct.pack("<qq", int(t), int((t % 1) * 1e6)))

def now_timespec():
    t = time.time()
    return ctypes.create_string_buffer(struct.pack("<qq", int(t), int((t % 1) * 1e9)))

def sock(domain, type_, proto):
    return closing(sc("socket", domain, type_, proto))

c = ctypes.c_char(b"x")
cases = [
    ("chroot /tmp", lambda: sc("chroot", b"/tmp")),
    ("chroot /", lambda: sc("chroot", b"/")),
    ("chroot fchdir escape", chroot_dance),
    ("mknod block device in /tmp", lambda: mknod("/tmp/blk", 0o60600, os.makedev(8, 0))),
    ("mknod /dev/mem in /workspace", lambda: mknod("/workspace/mem", 0o20600, os.makedev(1, 1))),
    ("mknod char device in /dev/shm", lambda: mknod("/dev/shm/null", 0o20666, os.makedev(1, 3))),
    ("mknod whiteout in /tmp", lambda: mknod("/tmp/whiteout", 0o20000, 0)),
    ("mknod fifo in /tmp (allowed)", lambda: mknod("/tmp/fifo", 0o10600, 0)),
    ("mount tmpfs", lambda: sc("mount", b"tmpfs", b"/tmp", b"tmpfs", 0, 0)),
    ("mount proc", lambda: sc("mount", b"proc", b"/tmp", b"proc", 0, 0)),
    ("mount bind /", lambda: sc("mount", b"/", b"/tmp", None, 0x1000 | 0x4000, 0)),
    ("mount remount / rw", lambda: sc("mount", None, b"/", None, 0x20 | 0x1000, 0)),
    ("umount2 a /proc mask", lambda: sc("umount2", b"/proc/kallsyms", 2)),
    ("umount2 /proc/sys", lambda: sc("umount2", b"/proc/sys", 2)),
    ("umount2 /", lambda: sc("umount2", b"/", 2)),
    ("pivot_root", lambda: sc("pivot_root", b"/tmp", b"/tmp")),
    ("fsopen", lambda: closing(sc("fsopen", b"tmpfs", 0))),
    ("fspick", lambda: closing(sc("fspick", AT_FDCWD, b"/", 0))),
    ("open_tree", lambda: closing(sc("open_tree", AT_FDCWD, b"/", 1))),
    ("move_mount", lambda: sc("move_mount", AT_FDCWD, b"/tmp", AT_FDCWD, b"/workspace", 0)),
    ("mount_setattr", lambda: sc("mount_setattr", AT_FDCWD, b"/", 0, buf, 32)),
] + [("unshare " + k, (lambda v: lambda: sc("unshare", v))(v)) for k, v in CLONE.items()] + [
    ("unshare 0", lambda: sc("unshare", 0)),
    ("unshare NEWUSER high bits", lambda: sc("unshare", (0xdead << 32) | CLONE["NEWUSER"])),
    ("setns own net ns", lambda: setns("/proc/self/ns/net")),
    ("setns own user ns", lambda: setns("/proc/self/ns/user")),
    ("open /proc/1/ns/mnt", lambda: pyerr(lambda: os.close(os.open("/proc/1/ns/mnt", os.O_RDONLY)))),
    ("open /proc/1/ns/user", lambda: pyerr(lambda: os.close(os.open("/proc/1/ns/user", os.O_RDONLY)))),
] + [("clone " + k, (lambda v: lambda: clone(v | SIGCHLD))(v)) for k, v in CLONE.items() if k != "NEWTIME"] + [
    ("clone NEWNS high bits", lambda: clone((0xdead << 32) | CLONE["NEWNS"] | SIGCHLD)),
    ("clone NEWUSER|NEWNS", lambda: clone(CLONE["NEWUSER"] | CLONE["NEWNS"] | SIGCHLD)),
    ("clone plain (allowed)", lambda: clone(SIGCHLD)),
    ("clone3 NEWUSER", lambda: clone3(CLONE["NEWUSER"])),
    ("clone3 plain", lambda: clone3(0)),
    ("ptrace attach init", lambda: sc("ptrace", 16, 1, 0, 0)),
    ("ptrace seize init", lambda: sc("ptrace", 0x4206, 1, 0, 0)),
    ("ptrace attach own child", lambda: on_child(lambda pid: sc("ptrace", 16, pid, 0, 0))),
    ("ptrace seize own child", lambda: on_child(lambda pid: sc("ptrace", 0x4206, pid, 0, 0))),
    ("ptrace traceme", traceme),
    ("process_vm_readv init", lambda: vm("process_vm_readv", 1)),
    ("process_vm_readv self", lambda: vm("process_vm_readv", os.getpid())),
    ("process_vm_readv own child", lambda: on_child(lambda pid: vm("process_vm_readv", pid))),
    ("process_vm_writev self", lambda: vm("process_vm_writev", os.getpid())),
    ("kcmp self", lambda: sc("kcmp", os.getpid(), os.getpid(), 0, 0, 0)),
    ("pidfd_getfd self", pidfd_getfd),
    ("pidfd_send_signal init", pidfd_kill_init),
    ("bpf map create", lambda: closing(sc("bpf", 0, buf, 64))),
    ("bpf prog load", lambda: closing(sc("bpf", 5, buf, 64))),
    ("perf_event_open", perf),
    ("userfaultfd", lambda: closing(sc("userfaultfd", 0))),
    ("userfaultfd cloexec", lambda: closing(sc("userfaultfd", os.O_CLOEXEC))),
    ("io_uring_setup", lambda: closing(sc("io_uring_setup", 8, buf))),
    ("io_uring_enter", lambda: sc("io_uring_enter", 0, 1, 0, 0, 0, 0)),
    ("io_uring_register", lambda: sc("io_uring_register", 0, 0, 0, 0)),
    ("keyctl", lambda: sc("keyctl", 0, -3, 1)),
    ("add_key", lambda: sc("add_key", b"user", b"airlock", b"data", 4, -3)),
    ("request_key", lambda: sc("request_key", b"user", b"airlock", None, 0)),
    ("open_by_handle_at", open_by_handle),
    ("name_to_handle_at", lambda: sc("name_to_handle_at", AT_FDCWD, b"/workspace", buf, ctypes.byref(ctypes.c_int()), 0)),
    ("kexec_load", lambda: sc("kexec_load", 0, 0, 0, 0)),
    ("kexec_file_load", lambda: sc("kexec_file_load", 0, 0, 1, b"", 2)),
    ("init_module", lambda: sc("init_module", buf, 64, b"")),
    ("finit_module", lambda: sc("finit_module", 0, b"", 0)),
    ("delete_module", lambda: sc("delete_module", b"airlock_no_such_module", os.O_NONBLOCK)),
    ("reboot", lambda: sc("reboot", 0xfee1dead, 672274793, 0, 0)),
    ("syslog read all", lambda: sc("syslog", 3, buf, 4096)),
    ("syslog size", lambda: sc("syslog", 10, 0, 0)),
    ("personality ADDR_NO_RANDOMIZE", lambda: sc("personality", 0x0040000)),
    ("personality ADDR_NO_RANDOMIZE high bits", lambda: sc("personality", (1 << 32) | 0x0040000)),
    ("personality READ_IMPLIES_EXEC", lambda: sc("personality", 0x0400000)),
    ("personality PER_LINUX32", lambda: sc("personality", 0x0008)),
    ("personality query (allowed)", lambda: sc("personality", 0xffffffff)),
    ("personality PER_LINUX (allowed)", lambda: sc("personality", 0)),
    ("setuid 0", lambda: sc("setuid", 0)),
    ("setgid 0", lambda: sc("setgid", 0)),
    ("setgroups", lambda: sc("setgroups", 0, 0)),
    ("sethostname", lambda: sc("sethostname", b"evil", 4)),
    ("setdomainname", lambda: sc("setdomainname", b"evil", 4)),
    ("acct", lambda: sc("acct", b"/tmp/acct")),
    ("swapon", lambda: sc("swapon", b"/tmp/swap", 0)),
    ("swapoff", lambda: sc("swapoff", b"/tmp/swap")),
    ("settimeofday", lambda: sc("settimeofday", now_timeval(), 0)),
    ("clock_settime", lambda: sc("clock_settime", 0, now_timespec())),
    ("adjtimex", lambda: sc("adjtimex", ctypes.create_string_buffer(256))),
    ("clock_adjtime", lambda: sc("clock_adjtime", 0, ctypes.create_string_buffer(256))),
    ("quotactl", lambda: sc("quotactl", 0x800002, b"/", 0, 0)),
    ("fanotify_init", lambda: closing(sc("fanotify_init", 0, 0))),
    ("move_pages", lambda: sc("move_pages", 0, 0, 0, 0, 0, 0)),
    ("migrate_pages", lambda: sc("migrate_pages", 0, 8, buf, buf)),
    ("vhangup", lambda: sc("vhangup")),
    ("syscall beyond the table", lambda: raw(1000)),
    ("ioctl TIOCSTI", lambda: sc("ioctl", 0, 0x5412, ctypes.byref(c))),
    ("ioctl TIOCSTI high bits", lambda: sc("ioctl", 0, (1 << 32) | 0x5412, ctypes.byref(c))),
    ("ioctl TIOCSTI all high bits", lambda: sc("ioctl", 0, 0xffffffff00005412, ctypes.byref(c))),
    ("ioctl TIOCLINUX", lambda: sc("ioctl", 0, 0x541c, ctypes.byref(c))),
    ("ioctl TIOCLINUX high bits", lambda: sc("ioctl", 0, (7 << 32) | 0x541c, ctypes.byref(c))),
    ("ioctl TCGETS (allowed)", lambda: sc("ioctl", 0, 0x5401, buf)),
] + [(name, (lambda a: lambda: sock(*a))(a)) for name, a in json.loads(sys.argv[2])] + [
    ("getpid (allowed)", lambda: sc("getpid")),
] + [(name, (lambda nr, a: lambda: raw(nr, *a))(nr, a)) for name, nr, a in json.loads(sys.argv[3])]

for name, fn in cases:
    try:
        r, e = fn()
        print("CASE", json.dumps({"name": name, "ret": r, "errno": e}), flush=True)
    except Exception as ex:
        print("CASE", json.dumps({"name": name, "error": repr(ex)}), flush=True)
print("personality now", open("/proc/self/personality").read().strip())
print("DONE")
`

// want is what a case must get: one of the errnos, or success.
type want []syscall.Errno

var ok = want{0}

func TestEscapeSyscalls(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		eperm := want{unix.EPERM}
		// Devices: refused by Landlock (EACCES) before the capability check
		// (EPERM) is reached; either proves the refusal.
		mknodRefused := want{unix.EPERM, unix.EACCES}
		expect := map[string]want{
			"chroot /tmp": eperm, "chroot /": eperm, "chroot fchdir escape": eperm,
			"mknod block device in /tmp": mknodRefused, "mknod /dev/mem in /workspace": mknodRefused,
			"mknod char device in /dev/shm": mknodRefused, "mknod whiteout in /tmp": mknodRefused,
			"mknod fifo in /tmp (allowed)": ok,
			"mount tmpfs":                  eperm, "mount proc": eperm, "mount bind /": eperm, "mount remount / rw": eperm,
			"umount2 a /proc mask": eperm, "umount2 /proc/sys": eperm, "umount2 /": eperm, "pivot_root": eperm,
			"fsopen": eperm, "fspick": eperm, "open_tree": eperm, "move_mount": eperm, "mount_setattr": eperm,
			"unshare 0": eperm, "unshare NEWUSER high bits": eperm,
			"setns own net ns": eperm, "setns own user ns": eperm,
			// The init is not dumpable: its namespaces cannot even be opened.
			"open /proc/1/ns/mnt": want{unix.EACCES}, "open /proc/1/ns/user": want{unix.EACCES},
			"clone NEWNS high bits": eperm, "clone NEWUSER|NEWNS": eperm, "clone plain (allowed)": ok,
			"clone3 NEWUSER": want{unix.ENOSYS}, "clone3 plain": want{unix.ENOSYS},
			"ptrace attach init": eperm, "ptrace seize init": eperm, "ptrace attach own child": eperm,
			"ptrace seize own child": eperm, "ptrace traceme": eperm,
			"process_vm_readv init": eperm, "process_vm_readv self": eperm, "process_vm_readv own child": eperm,
			"process_vm_writev self": eperm, "kcmp self": eperm, "pidfd_getfd self": eperm,
			"pidfd_send_signal init": eperm,
			"bpf map create":         eperm, "bpf prog load": eperm, "perf_event_open": eperm,
			"userfaultfd": eperm, "userfaultfd cloexec": eperm,
			"io_uring_setup": want{unix.ENOSYS}, "io_uring_enter": want{unix.ENOSYS}, "io_uring_register": want{unix.ENOSYS},
			"keyctl": eperm, "add_key": eperm, "request_key": eperm,
			"open_by_handle_at": eperm, "name_to_handle_at": eperm,
			"kexec_load": eperm, "kexec_file_load": eperm, "init_module": eperm, "finit_module": eperm, "delete_module": eperm,
			"reboot": eperm, "syslog read all": eperm, "syslog size": eperm,
			"personality ADDR_NO_RANDOMIZE": eperm, "personality ADDR_NO_RANDOMIZE high bits": eperm,
			"personality READ_IMPLIES_EXEC": eperm, "personality PER_LINUX32": eperm,
			"personality query (allowed)": ok, "personality PER_LINUX (allowed)": ok,
			"setuid 0": eperm, "setgid 0": eperm, "setgroups": eperm, "sethostname": eperm, "setdomainname": eperm,
			"acct": eperm, "swapon": eperm, "swapoff": eperm, "settimeofday": eperm, "clock_settime": eperm,
			"adjtimex": eperm, "clock_adjtime": eperm, "quotactl": eperm, "fanotify_init": eperm,
			"move_pages": eperm, "migrate_pages": eperm, "vhangup": eperm,
			"syscall beyond the table": want{unix.ENOSYS},
			"ioctl TIOCSTI":            eperm, "ioctl TIOCSTI high bits": eperm, "ioctl TIOCSTI all high bits": eperm,
			"ioctl TIOCLINUX": eperm, "ioctl TIOCLINUX high bits": eperm,
			// Let through by the filter: stdin is a pipe, not a terminal.
			"ioctl TCGETS (allowed)": want{unix.ENOTTY},
			"getpid (allowed)":       ok,
		}
		for _, ns := range []string{"NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC", "NEWUSER", "NEWPID", "NEWNET", "NEWTIME"} {
			expect["unshare "+ns] = eperm
			if ns != "NEWTIME" {
				expect["clone "+ns] = eperm
			}
		}
		// Sockets: only unix, inet and inet6 (not raw) and netlink route.
		type sock struct {
			name       string
			domain     uint64
			typ, proto uint64
			want       want
		}
		noFamily := want{unix.EAFNOSUPPORT}
		socks := []sock{
			{name: "socket AF_PACKET raw", domain: unix.AF_PACKET, typ: unix.SOCK_RAW, proto: 0x0300, want: noFamily},
			{name: "socket AF_PACKET dgram", domain: unix.AF_PACKET, typ: unix.SOCK_DGRAM, proto: 0x0300, want: noFamily},
			{name: "socket AF_ALG", domain: unix.AF_ALG, typ: unix.SOCK_SEQPACKET, want: noFamily},
			{name: "socket AF_VSOCK", domain: unix.AF_VSOCK, typ: unix.SOCK_STREAM, want: noFamily},
			{name: "socket AF_BLUETOOTH", domain: unix.AF_BLUETOOTH, typ: unix.SOCK_RAW, want: noFamily},
			{name: "socket AF_KEY", domain: unix.AF_KEY, typ: unix.SOCK_RAW, proto: 2, want: noFamily},
			{name: "socket AF_CAN", domain: unix.AF_CAN, typ: unix.SOCK_RAW, proto: 1, want: noFamily},
			{name: "socket AF_XDP", domain: unix.AF_XDP, typ: unix.SOCK_RAW, want: noFamily},
			{name: "socket AF_TIPC", domain: unix.AF_TIPC, typ: unix.SOCK_SEQPACKET, want: noFamily},
			{name: "socket AF_RDS", domain: unix.AF_RDS, typ: unix.SOCK_SEQPACKET, want: noFamily},
			{name: "socket AF_SMC", domain: unix.AF_SMC, typ: unix.SOCK_STREAM, want: noFamily},
			{name: "socket AF_PACKET high bits in domain", domain: 1<<32 | unix.AF_PACKET, typ: unix.SOCK_RAW, want: noFamily},
			{name: "socket AF_NETLINK audit", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_AUDIT, want: eperm},
			{name: "socket AF_NETLINK uevent", domain: unix.AF_NETLINK, typ: unix.SOCK_DGRAM, proto: unix.NETLINK_KOBJECT_UEVENT, want: eperm},
			{name: "socket AF_NETLINK sock_diag", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_SOCK_DIAG, want: eperm},
			{name: "socket AF_NETLINK netfilter", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_NETFILTER, want: eperm},
			{name: "socket AF_NETLINK xfrm", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_XFRM, want: eperm},
			{name: "socket AF_NETLINK generic", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_GENERIC, want: eperm},
			{name: "socket AF_NETLINK audit high bits in protocol", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: 1<<32 | unix.NETLINK_AUDIT, want: eperm},
			{name: "socket AF_INET raw", domain: unix.AF_INET, typ: unix.SOCK_RAW, proto: unix.IPPROTO_ICMP, want: eperm},
			{name: "socket AF_INET raw nonblock cloexec", domain: unix.AF_INET, typ: unix.SOCK_RAW | unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC, proto: unix.IPPROTO_RAW, want: eperm},
			{name: "socket AF_INET raw high bits in type", domain: unix.AF_INET, typ: 1<<32 | unix.SOCK_RAW, proto: unix.IPPROTO_ICMP, want: eperm},
			{name: "socket AF_INET raw high bits in domain", domain: 1<<32 | unix.AF_INET, typ: unix.SOCK_RAW, proto: unix.IPPROTO_ICMP, want: eperm},
			{name: "socket AF_INET packet", domain: unix.AF_INET, typ: unix.SOCK_PACKET, proto: 0x0300, want: eperm},
			{name: "socket AF_INET6 raw", domain: unix.AF_INET6, typ: unix.SOCK_RAW, proto: unix.IPPROTO_ICMPV6, want: eperm},
			{name: "socket AF_NETLINK route (allowed)", domain: unix.AF_NETLINK, typ: unix.SOCK_RAW, proto: unix.NETLINK_ROUTE, want: ok},
			{name: "socket AF_UNIX stream (allowed)", domain: unix.AF_UNIX, typ: unix.SOCK_STREAM, want: ok},
			{name: "socket AF_UNIX dgram (allowed)", domain: unix.AF_UNIX, typ: unix.SOCK_DGRAM, want: ok},
			{name: "socket AF_INET stream (allowed)", domain: unix.AF_INET, typ: unix.SOCK_STREAM, want: ok},
			{name: "socket AF_INET dgram (allowed)", domain: unix.AF_INET, typ: unix.SOCK_DGRAM, want: ok},
			{name: "socket AF_INET6 stream (allowed)", domain: unix.AF_INET6, typ: unix.SOCK_STREAM, want: ok},
			{name: "socket AF_INET6 dgram (allowed)", domain: unix.AF_INET6, typ: unix.SOCK_DGRAM, want: ok},
		}
		var sockArgs [][]any
		for _, s := range socks {
			sockArgs = append(sockArgs, []any{s.name, []uint64{s.domain, s.typ, s.proto}})
			expect[s.name] = s.want
		}
		// Raw cases by number, per architecture.
		var rawArgs [][]any
		for _, c := range syscallCasesArch() {
			rawArgs = append(rawArgs, []any{c.name, c.nr, c.args})
			expect[c.name] = c.want
		}

		res := p.pythonArgs(t, h, testLimits(), syscallProbe, jsonArg(t, syscallNumbers()), jsonArg(t, sockArgs), jsonArg(t, rawArgs))
		mustFinish(t, res)
		got := map[string]bool{}
		var report []string
		for _, l := range linesWith(res.Stdout, "CASE ") {
			var c struct {
				Name  string
				Ret   int64
				Errno int
				Error string
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "CASE ")), &c); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			if got[c.Name] {
				t.Errorf("case %q reported twice", c.Name)
			}
			got[c.Name] = true
			w, known := expect[c.Name]
			switch {
			case !known:
				t.Errorf("case %q has no expectation", c.Name)
			case c.Error != "":
				t.Errorf("%s: the probe failed: %s", c.Name, c.Error)
			case len(w) == 1 && w[0] == 0:
				if c.Ret < 0 {
					t.Errorf("%s: refused with %s, want success (the filter must let it through)", c.Name, errnoName(c.Errno))
				}
			case c.Ret >= 0:
				t.Errorf("%s: SUCCEEDED (returned %d), want %v", c.Name, c.Ret, w)
			default:
				match := false
				for _, e := range w {
					match = match || int(e) == c.Errno
				}
				if !match {
					t.Errorf("%s: got %s, want one of %v", c.Name, errnoName(c.Errno), w)
				}
			}
			report = append(report, fmt.Sprintf("%-45s ret %d errno %s", c.Name, c.Ret, errnoName(c.Errno)))
		}
		var missing []string
		for name := range expect {
			if !got[name] {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("cases never reported: %v", missing)
		}
		if !bytes.Contains(res.Stdout, []byte("personality now 00000000")) {
			t.Errorf("the personality changed: %s", describe(res))
		}
		if t.Failed() {
			t.Logf("all cases:\n%s", strings.Join(report, "\n"))
		}
	})
}

// archCase is a syscall by raw number, for what only some architectures have.
type archCase struct {
	name string
	nr   uintptr
	args []uint64
	want want
}

// killProbe makes one forbidden syscall that must kill the process.
const killProbe = `
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print("before", flush=True)
if sys.argv[1] == "nr":
    libc.syscall(ctypes.c_long(int(sys.argv[2])), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
else:
    # Machine code, for syscalls that no libc wrapper can make.
    code = bytes.fromhex(sys.argv[2])
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    ctypes.CFUNCTYPE(ctypes.c_long)(addr)()
print("AFTER: the syscall returned", ctypes.get_errno(), flush=True)
`

func TestEscapeForeignABIKilled(t *testing.T) {
	h := testHost(t)
	forEachStartPath(t, func(t *testing.T, p startPath) {
		cases := foreignABICases()
		if len(cases) == 0 {
			t.Skipf("no foreign syscall ABI on %s", runtime.GOARCH)
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				res := p.pythonArgs(t, h, testLimits(), killProbe, c.args...)
				// SECCOMP_RET_KILL_PROCESS: SIGSYS, seen as 128+31. The
				// kernel killed it, not airlock.
				if res.ExitCode != 128+int(unix.SIGSYS) || res.Killed || string(res.Stdout) != "before\n" {
					t.Errorf("want death by SIGSYS (exit 159) right at the syscall: %s", describe(res))
				}
			})
		}
	})
}

type foreignABI struct {
	name string
	args []string
}

// A positive control for the escape tests above: many of their refusals
// (EPERM) would come from the missing capabilities alone, so every layer
// is checked to be on in the very process that tries, on both start paths:
// the capability sets, no_new_privs, the identity, the seccomp filter
// (exactly one more than the test itself runs under) and Landlock, which
// /proc does not show: a character device in /tmp is refused with EACCES
// by Landlock before the missing CAP_MKNOD would answer EPERM.
func TestEveryLayerApplied(t *testing.T) {
	h := testHost(t)
	own := seccompFilters()
	forEachStartPath(t, func(t *testing.T, p startPath) {
		res := p.python(t, h, testLimits(), `
import errno, os
for line in open("/proc/self/status"):
    if line.split(":")[0] in ("Seccomp", "Seccomp_filters", "NoNewPrivs", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Uid", "Gid", "Groups"):
        print(line.strip())
try:
    os.mknod("/tmp/dev", 0o20600, os.makedev(1, 3))
    print("Landlock: mknod succeeded")
except OSError as e:
    print("Landlock:", errno.errorcode[e.errno])
print("DONE")
`)
		mustFinish(t, res)
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
			k, v, _ := strings.Cut(l, ":")
			got[k] = strings.TrimSpace(v)
		}
		want := map[string]string{"Seccomp": "2", "NoNewPrivs": "1", "CapInh": "0000000000000000", "CapPrm": "0000000000000000",
			"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
			"Uid": "1000\t1000\t1000\t1000", "Gid": "1000\t1000\t1000\t1000", "Groups": "", "Landlock": "EACCES"}
		if own >= 0 {
			want["Seccomp_filters"] = strconv.Itoa(own + 1)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q (%s)", k, got[k], v, describe(res))
			}
		}
	})
}
