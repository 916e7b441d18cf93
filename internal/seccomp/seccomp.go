// Package seccomp owns the syscall filter every sandboxed process runs
// under: the policy (what is denied and with which errno) and its
// compilation to classic BPF once per process, whose bytes (Bytes) the
// sandbox's init installs (package jailinit, which does not link this
// compiler) and the Python template's children install themselves.
//
// The filter is a denylist over the native ABI with default allow, guarded
// by an architecture check that kills the process for any foreign
// architecture or the x32 ABI, and by an upper bound that answers ENOSYS
// for syscall numbers newer than the table this build knows. Argument
// checks compare only the low 32 bits the kernel reads for int-typed
// arguments, so that garbage in the high half cannot slip past them.
//
// It must never weaken the policy to make a program work: a syscall is
// added to the allowed set only by changing the policy here, with a test.
package seccomp

import (
	"fmt"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Actions returned by the filter (values from linux/seccomp.h).
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retAllow       = 0x7fff0000

	errEPERM        = 1
	errENOSYS       = 38
	errEAFNOSUPPORT = 97
)

// Argument constants the filter inspects.
const (
	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	sockRaw    = 3
	sockPacket = 10
	sockType   = 0xf // SOCK_TYPE_MASK: the rest are SOCK_NONBLOCK/CLOEXEC

	netlinkRoute = 0

	tiocsti   = 0x5412
	tioclinux = 0x541c

	personalityQuery = 0xffffffff
	perLinux         = 0

	// CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET. CLONE_NEWTIME
	// overlaps the exit-signal bits of clone(2) and is only reachable
	// through clone3 and unshare, both refused.
	cloneNamespaces = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

	x32SyscallBit = 0x40000000
)

// Policy is the set of syscalls refused to sandboxed code.
type Policy struct {
	// Deny fails with EPERM.
	Deny []string
	// NotImplemented fails with ENOSYS, so that libc falls back (clone3)
	// or the runtime quietly does without (io_uring).
	NotImplemented []string
}

// DefaultPolicy is the policy every sandbox gets. The groups say what each
// denial protects.
func DefaultPolicy() Policy {
	var deny []string
	for _, group := range [][]string{
		// Reading or steering other processes.
		{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp"},
		// Changing the filesystem view: mounts, roots, namespaces.
		{"mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
			"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "open_tree_attr"},
		// Large kernel attack surface that sandboxed code has no use for.
		{"bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie"},
		{"keyctl", "add_key", "request_key"},
		// Replacing the kernel or its modules.
		{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
			"create_module", "query_module", "get_kernel_syms"},
		// Escaping a bind mount by file handle (the "shocker" escape).
		{"open_by_handle_at", "name_to_handle_at"},
		// Host-wide state.
		{"reboot", "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd", "nfsservctl",
			"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
			"lsm_set_self_attr", "move_pages", "migrate_pages", "_sysctl", "uselib", "ustat", "sysfs"},
		// Direct hardware and segment access.
		{"iopl", "ioperm", "modify_ldt"},
	} {
		deny = append(deny, group...)
	}
	return Policy{
		Deny:           deny,
		NotImplemented: []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"},
	}
}

// Program is a compiled filter, ready to install.
type Program []bpf.RawInstruction

// Build compiles the policy for the architecture this binary runs on.
func Build(p Policy) (Program, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return build(p, info)
}

func build(p Policy, info *arch.Info) (Program, error) {
	nr := func(name string) (uint32, error) {
		n, ok := info.SyscallNames[name]
		if !ok {
			return 0, fmt.Errorf("seccomp: syscall %q unknown on %s", name, info.Name)
		}
		return uint32(n), nil
	}
	var names struct{ ioctl, socket, personality, clone, clone3 uint32 }
	for _, f := range []struct {
		dst  *uint32
		name string
	}{{&names.ioctl, "ioctl"}, {&names.socket, "socket"}, {&names.personality, "personality"},
		{&names.clone, "clone"}, {&names.clone3, "clone3"}} {
		n, err := nr(f.name)
		if err != nil {
			return nil, err
		}
		*f.dst = n
	}
	maxNr := 0
	for n := range info.SyscallNumbers {
		maxNr = max(maxNr, n)
	}

	// Syscalls that do not exist on this architecture (create_module on
	// arm64, say) are simply absent: there is nothing to deny.
	present := func(list []string) []string {
		var out []string
		for _, s := range list {
			if _, ok := info.SyscallNames[s]; ok {
				out = append(out, s)
			}
		}
		return out
	}
	lib := libseccomp.Policy{
		DefaultAction: libseccomp.ActionAllow,
		Syscalls: []libseccomp.SyscallGroup{
			{Names: present(p.Deny), Action: libseccomp.ActionErrno | errEPERM},
			{Names: present(p.NotImplemented), Action: libseccomp.ActionErrno | errENOSYS},
		},
	}
	body, err := lib.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}

	// The guard and the argument checks, in front of the library's
	// name-based groups. seccomp_data: nr at 0, arch at 4, args at 16+8i,
	// loaded in native byte order; on little-endian the low half of an
	// argument comes first.
	argLo := func(i uint32) uint32 { return 16 + 8*i + loOffset }
	a := &asm{labels: map[string]int{}}
	a.ld(4)
	a.jeq(uint32(info.ID), "", "kill")
	a.ld(0)
	if info.SeccompMask == 0 && info.Name == "x86_64" {
		a.jge(x32SyscallBit, "kill", "")
	}
	a.jgt(uint32(maxNr), "enosys", "")
	a.jeq(names.ioctl, "ioctl", "")
	a.jeq(names.socket, "socket", "")
	a.jeq(names.personality, "personality", "")
	a.jeq(names.clone, "clone", "")
	a.ja("lib")

	// ioctl(fd, cmd, ...): cmd is an unsigned int.
	a.label("ioctl")
	a.ld(argLo(1))
	a.jeq(tiocsti, "eperm", "")
	a.jeq(tioclinux, "eperm", "")
	a.ja("lib")

	// socket(domain, type, protocol): all ints.
	a.label("socket")
	a.ld(argLo(0))
	a.jeq(afUnix, "lib", "")
	a.jeq(afInet, "inet", "")
	a.jeq(afInet6, "inet", "")
	a.jeq(afNetlink, "netlink", "eafnosupport")
	a.label("inet")
	a.ld(argLo(1))
	a.and(sockType)
	a.jeq(sockRaw, "eperm", "")
	a.jeq(sockPacket, "eperm", "lib")
	a.label("netlink")
	a.ld(argLo(2))
	a.jeq(netlinkRoute, "lib", "eperm")

	// personality(persona): only the query and plain Linux, so code cannot
	// turn off address-space randomization or emulate other ABIs.
	a.label("personality")
	a.ld(argLo(0))
	a.jeq(personalityQuery, "lib", "")
	a.jeq(perLinux, "lib", "eperm")

	// clone(flags, ...): the kernel uses the low 32 bits of flags.
	a.label("clone")
	a.ld(argLo(0))
	a.jset(cloneNamespaces, "eperm", "lib")

	// Verdicts, after every block so that all jumps go forward.
	a.label("kill")
	a.ret(retKillProcess)
	a.label("enosys")
	a.ret(retErrno | errENOSYS)
	a.label("eperm")
	a.ret(retErrno | errEPERM)
	a.label("eafnosupport")
	a.ret(retErrno | errEAFNOSUPPORT)

	a.label("lib")
	prefix, err := a.assemble()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(append(prefix, body...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(raw) > 4096 {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, over the kernel's 4096", len(raw))
	}
	return raw, nil
}
