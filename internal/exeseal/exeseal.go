// Package exeseal owns the executable the host runs as every sandbox's
// init, which no sandbox can write or re-open for writing (runc
// CVE-2019-5736): the running airlock binary, or the small init binary
// (cmd/airlock-init) that scripts/build.sh builds into it, used only when
// it carries the stamp of the sources this binary was built from.
//
// The preferred form is a detached, read-only, nosuid bind mount of the
// binary made with open_tree(2): it costs no copy, belongs to no mount
// namespace (so nobody can remount it writable), and the kernel refuses any
// write through it with EROFS. Where that is unavailable, and for the
// embedded init, a sealed memfd copy is used instead.
//
// It must never hand out a path into the host filesystem.
package exeseal

// Method names how the executable was sealed.
type Method string

const (
	DetachedMount Method = "read-only detached mount"
	SealedMemfd   Method = "sealed memfd copy"
)
