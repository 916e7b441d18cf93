// Package landlock owns the Landlock layer of the jail: which trees a
// sandboxed process may read, execute and write, built into a ruleset
// inside the sandbox's own mount namespace, with the best ABI the kernel
// offers.
//
// Reads and execution are confined to the sandbox root, so that a file
// reached through any descriptor that leaked from outside the root is
// refused even if another layer failed. Writes are confined to the
// writable scratch trees and a few device files. On ABI 6 and later,
// signals and abstract unix sockets are scoped to the sandbox.
//
// It must never silently drop a layer: callers decide, from ABI(), whether
// the result satisfies the configured policy.
package landlock

// Rules describes what a sandboxed process may touch. Paths are resolved
// in the caller's mount namespace when the ruleset is created.
type Rules struct {
	// ReadExec are trees whose files may be read, listed and executed.
	ReadExec []string
	// WritableDirs are trees that may also be written, created in,
	// renamed within and removed from.
	WritableDirs []string
	// WritableFiles are single files (device nodes) that may be written.
	WritableFiles []string
	// DeviceDirs are trees of device nodes (the sandbox's own devpts)
	// whose files may be read, written and given device ioctls, with no
	// right to create or remove anything in them.
	DeviceDirs []string
}

// SandboxRules are the rules for the standard sandbox layout.
func SandboxRules() Rules {
	return Rules{
		ReadExec:      []string{"/"},
		WritableDirs:  []string{"/workspace", "/tmp", "/dev/shm"},
		WritableFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"},
		DeviceDirs:    []string{"/dev/pts"},
	}
}
