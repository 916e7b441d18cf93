// Package workspace owns every host-side access to a sandbox's files. The
// host holds a descriptor for the root of the sandbox's /workspace tmpfs,
// taken before any sandboxed code ran, and resolves every path beneath it
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
// RESOLVE_NO_XDEV), so that no symlink, hardlink, bind mount or race the
// sandbox sets up can redirect the host (docker cp CVE-2018-15664).
//
// It must never resolve a path from the host's root, never follow a
// symlink, and never read or write anything but regular files and
// directories.
package workspace

import (
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"airlock/internal/errdefs"
)

// Limits on paths clients may name.
const (
	MaxPathLen    = 1024
	MaxNameLen    = 255
	MaxPathDepth  = 32
	MaxListLength = 10000
)

// Entry describes one file or directory.
type Entry struct {
	Path    string    `json:"path"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mtime"`
	// Ino (with ModTime) tells a rewritten file from an untouched one.
	Ino uint64 `json:"-"`
}

// Clean validates a client-supplied path relative to /workspace and
// returns it in canonical form. It accepts "a/b.txt", "./a/b" and
// "/workspace/a/b" (the absolute form sandboxed code sees); it rejects
// "..", other absolute paths, NUL and control bytes, invalid UTF-8, and
// over-long names. The empty path and "." name the workspace itself and
// yield "".
func Clean(p string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: path %q: %s", errdefs.ErrInvalidArgument, truncate(p), why)
	}
	if len(p) > MaxPathLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxPathLen))
	}
	if !utf8.ValidString(p) {
		return bad("not valid UTF-8")
	}
	// Control characters are allowed: code may name files with them, and
	// what a listing shows must be addressable. Every message and log line
	// quotes a path (%q, slog), so a terminal never acts on one. NUL can
	// name nothing.
	if strings.IndexByte(p, 0) >= 0 {
		return bad("contains NUL")
	}
	if p == "/workspace" {
		return "", nil
	}
	if rest, ok := strings.CutPrefix(p, "/workspace/"); ok {
		p = rest
	} else if strings.HasPrefix(p, "/") {
		return bad("absolute paths must be under /workspace")
	}
	parts := strings.Split(p, "/")
	var out []string
	for _, part := range parts {
		switch part {
		case "", ".":
			continue
		case "..":
			return bad("must not contain ..")
		}
		if len(part) > MaxNameLen {
			return bad(fmt.Sprintf("a name is longer than %d bytes", MaxNameLen))
		}
		out = append(out, part)
	}
	if len(out) > MaxPathDepth {
		return bad(fmt.Sprintf("deeper than %d levels", MaxPathDepth))
	}
	return path.Join(out...), nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
