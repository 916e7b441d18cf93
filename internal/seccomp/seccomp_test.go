package seccomp

import (
	"encoding/binary"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// run evaluates the compiled filter in the x/net/bpf VM on a synthetic
// seccomp_data. The VM loads words big-endian, so each 32-bit field is
// stored big-endian at the offset the kernel would load it from natively.
func run(t *testing.T, prog Program, archID uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	ins := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		ins[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("NewVM: %v", err)
	}
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], archID)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(data[off+int(loOffset):], uint32(a))
		binary.BigEndian.PutUint32(data[off+4-int(loOffset):], uint32(a>>32))
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatalf("vm.Run: %v", err)
	}
	return uint32(v)
}

func native(t *testing.T) *arch.Info {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skipf("no syscall table for this architecture: %v", err)
	}
	return info
}

func TestFilterDecisions(t *testing.T) {
	info := native(t)
	prog, err := Build(DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	nr := func(name string) uint32 {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no syscall %s", name)
		}
		return uint32(n)
	}
	const (
		allow       = retAllow
		kill        = retKillProcess
		eperm       = retErrno | errEPERM
		enosys      = retErrno | errENOSYS
		eafnosup    = retErrno | errEAFNOSUPPORT
		sockNonblk  = 0x800
		sockCloexec = 0x80000
		hi          = uint64(1) << 32
	)
	native := uint32(info.ID)
	tests := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"getpid allowed", native, nr("getpid"), nil, allow},
		{"read allowed", native, nr("read"), nil, allow},
		{"foreign architecture killed", 0x40000003 /* i386 */, 20, nil, kill},
		{"unknown future syscall", native, 4000, nil, enosys},
		{"clone3 not implemented", native, nr("clone3"), nil, enosys},
		{"io_uring not implemented", native, nr("io_uring_setup"), nil, enosys},
		{"ptrace denied", native, nr("ptrace"), nil, eperm},
		{"mount denied", native, nr("mount"), nil, eperm},
		{"unshare denied", native, nr("unshare"), nil, eperm},
		{"setns denied", native, nr("setns"), nil, eperm},
		{"open_by_handle_at denied", native, nr("open_by_handle_at"), nil, eperm},
		{"TIOCSTI denied", native, nr("ioctl"), []uint64{0, tiocsti}, eperm},
		{"TIOCSTI with high garbage denied", native, nr("ioctl"), []uint64{0, hi | tiocsti}, eperm},
		{"TIOCLINUX denied", native, nr("ioctl"), []uint64{0, tioclinux}, eperm},
		{"TCGETS allowed", native, nr("ioctl"), []uint64{0, 0x5401}, allow},
		{"unix socket", native, nr("socket"), []uint64{afUnix, 1, 0}, allow},
		{"tcp socket", native, nr("socket"), []uint64{afInet, 1 | sockCloexec, 0}, allow},
		{"udp6 socket", native, nr("socket"), []uint64{afInet6, 2, 0}, allow},
		{"raw socket denied", native, nr("socket"), []uint64{afInet, sockRaw, 1}, eperm},
		{"raw socket with flags denied", native, nr("socket"), []uint64{afInet6, sockRaw | sockNonblk | sockCloexec, 58}, eperm},
		{"SOCK_PACKET denied", native, nr("socket"), []uint64{afInet, sockPacket, 0}, eperm},
		{"AF_PACKET denied", native, nr("socket"), []uint64{17, sockRaw, 0}, eafnosup},
		{"AF_PACKET hidden by high bits denied", native, nr("socket"), []uint64{hi | 17, sockRaw, 0}, eafnosup},
		{"AF_ALG denied", native, nr("socket"), []uint64{38, 5, 0}, eafnosup},
		{"AF_VSOCK denied", native, nr("socket"), []uint64{40, 1, 0}, eafnosup},
		{"netlink route allowed", native, nr("socket"), []uint64{afNetlink, sockRaw | sockCloexec, netlinkRoute}, allow},
		{"netlink audit denied", native, nr("socket"), []uint64{afNetlink, sockRaw, 9}, eperm},
		{"personality query allowed", native, nr("personality"), []uint64{personalityQuery}, allow},
		{"personality linux allowed", native, nr("personality"), []uint64{perLinux}, allow},
		{"ADDR_NO_RANDOMIZE denied", native, nr("personality"), []uint64{0x0040000}, eperm},
		{"plain fork allowed", native, nr("clone"), []uint64{17 /* SIGCHLD */}, allow},
		{"vfork-style clone allowed", native, nr("clone"), []uint64{0x100 | 0x4000 | 17}, allow},
		{"thread clone allowed", native, nr("clone"), []uint64{0x3d0f00}, allow},
		{"clone new user ns denied", native, nr("clone"), []uint64{0x10000000 | 17}, eperm},
		{"clone new net ns denied", native, nr("clone"), []uint64{hi | 0x40000000 | 17}, eperm},
		{"clone new mount ns denied", native, nr("clone"), []uint64{0x00020000}, eperm},
	}
	if info.Name == "x86_64" {
		tests = append(tests, struct {
			name string
			arch uint32
			nr   uint32
			args []uint64
			want uint32
		}{"x32 ABI killed", native, x32SyscallBit | 39, nil, kill})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, prog, tc.arch, tc.nr, tc.args...); got != tc.want {
				t.Errorf("got %#x, want %#x", got, tc.want)
			}
		})
	}
}

// Every syscall the policy names must be refused, and a sample of everyday
// syscalls must not be.
func TestEveryDeniedNameIsRefused(t *testing.T) {
	info := native(t)
	p := DefaultPolicy()
	prog, err := Build(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range p.Deny {
		n, ok := info.SyscallNames[name]
		if !ok {
			continue
		}
		if got := run(t, prog, uint32(info.ID), uint32(n)); got != retErrno|errEPERM {
			t.Errorf("%s: got %#x, want EPERM", name, got)
		}
	}
	for _, name := range []string{"openat", "write", "mmap", "execve", "wait4", "futex", "getrandom", "kill", "seccomp", "landlock_restrict_self", "mknodat"} {
		n := info.SyscallNames[name]
		if got := run(t, prog, uint32(info.ID), uint32(n)); got != retAllow {
			t.Errorf("%s: got %#x, want allow", name, got)
		}
	}
}

func TestUnknownNameFailsBuild(t *testing.T) {
	info := native(t)
	if _, err := build(Policy{Deny: []string{"getpid"}}, info); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	// Names missing on this architecture are skipped, not errors: they
	// cannot be called.
	if _, err := build(Policy{Deny: []string{"no_such_syscall"}, NotImplemented: []string{"clone3"}}, info); err != nil {
		t.Fatalf("absent name: %v", err)
	}
}

func TestBytesLayout(t *testing.T) {
	prog, err := Build(DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	b := prog.Bytes()
	if len(b) != 8*len(prog) {
		t.Fatalf("len %d, want %d", len(b), 8*len(prog))
	}
	if k := binary.NativeEndian.Uint32(b[4:8]); k != prog[0].K {
		t.Fatalf("K of first instruction %#x, want %#x", k, prog[0].K)
	}
}
