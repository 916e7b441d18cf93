// Package exeseal owns the executable the host runs as every sandbox's
// init, which no sandbox can write or re-open for writing (runc
// CVE-2019-5736): the running airlock binary, or the small init binary
// (cmd/airlock-init) that scripts/build.sh builds into it, used only when
// it carries the stamp of the sources this binary was built from.
//
// The preferred form is a detached, read-only, nosuid bind mount of the
// binary made with open_tree(2): it costs no copy, belongs to no mount
// namespace (so nobody can remount it writable), and the kernel refuses any
// write through it with EROFS; the embedded init is first written, once
// per build, to a file in a directory only root can write (OpenIn). Where
// that is unavailable, a sealed memfd copy is used instead.
//
// It must never hand out a path into the host filesystem.
package exeseal

// Method names how the executable was sealed.
type Method string

const (
	DetachedMount Method = "read-only detached mount"
	SealedMemfd   Method = "sealed memfd copy"
)
