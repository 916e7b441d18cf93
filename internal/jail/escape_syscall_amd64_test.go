package jail

import (
	"strconv"

	"golang.org/x/sys/unix"
)

func syscallNumbersArch() map[string]uintptr { return nil }

// syscallCasesArch are the x86-only syscalls the policy denies.
func syscallCasesArch() []archCase {
	eperm := want{unix.EPERM}
	// Syscalls this kernel no longer has: denied if the filter knows
	// them, ENOSYS from the kernel otherwise. Neither runs anything.
	gone := want{unix.EPERM, unix.ENOSYS}
	return []archCase{
		{"iopl", unix.SYS_IOPL, []uint64{3}, eperm},
		{"ioperm", unix.SYS_IOPERM, []uint64{0x80, 1, 1}, eperm},
		{"modify_ldt", unix.SYS_MODIFY_LDT, []uint64{0, 0, 0}, eperm},
		{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, []uint64{0, 0, 0}, eperm},
		{"uselib", unix.SYS_USELIB, []uint64{0}, eperm},
		{"ustat", unix.SYS_USTAT, []uint64{0, 0}, eperm},
		{"sysfs", unix.SYS_SYSFS, []uint64{3}, eperm},
		{"_sysctl", unix.SYS__SYSCTL, []uint64{0}, eperm},
		{"nfsservctl", unix.SYS_NFSSERVCTL, []uint64{0, 0, 0}, gone},
		{"create_module", unix.SYS_CREATE_MODULE, []uint64{0, 0}, gone},
		{"query_module", unix.SYS_QUERY_MODULE, []uint64{0, 0, 0, 0, 0}, gone},
		{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS, []uint64{0}, gone},
	}
}

// foreignABICases are syscalls through the x32 ABI (the 0x40000000 bit)
// and the i386 ABI (int 0x80): the filter only knows the native table, so
// both must kill the process before the kernel looks at the number.
func foreignABICases() []foreignABI {
	x32 := func(nr uint64) string { return strconv.FormatUint(0x40000000|nr, 10) }
	return []foreignABI{
		{"x32 getpid", []string{"nr", x32(unix.SYS_GETPID)}},
		{"x32 unshare", []string{"nr", x32(unix.SYS_UNSHARE)}},
		{"x32 rt_sigaction", []string{"nr", x32(512)}},
		{"x32 bit beyond every table", []string{"nr", strconv.FormatUint(0x40000000|0x3fffffff, 10)}},
		// mov eax, 20 (i386 getpid); int 0x80; ret
		{"i386 getpid", []string{"code", "b814000000cd80c3"}},
		// mov eax, 310 (i386 unshare); xor ebx, ebx; int 0x80; ret
		{"i386 unshare", []string{"code", "b83601000031dbcd80c3"}},
	}
}
