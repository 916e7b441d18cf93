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
	"unicode"
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
// "..", other absolute paths, what ValidName rejects, and over-long names.
// The empty path and "." name the workspace itself and yield "".
func Clean(p string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w: path %q: %s", errdefs.ErrInvalidArgument, truncate(p), why)
	}
	if err := ValidName(p); err != nil {
		return "", err
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

// ValidName checks the characters of a path a client names, in the files
// API, a run's files and filename, a command's cwd and the MCP tools: at
// most MaxPathLen bytes of valid UTF-8 without control characters (C0,
// NUL included, DEL and C1). Such names forge lines and drive terminals
// wherever a name is shown. Code in the sandbox may still make files with
// them: those are listed (JSON escapes them) and reported as changed, and
// one-shot and program runs return them with their content, but no client
// names them: a command renames them.
func ValidName(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: path %q: %s", errdefs.ErrInvalidArgument, truncate(p), why)
	}
	if len(p) > MaxPathLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxPathLen))
	}
	if !utf8.ValidString(p) {
		return bad("not valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return bad(fmt.Sprintf("contains the control character %U; names with control characters are refused (rename such a file the code made with a command)", r))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
