// Package image owns templates' root filesystems: the store that keeps
// them on the host (one directory per template, immutable versions, the
// current one named by a pointer, every version in use held by a shared
// lock and removed once nothing holds it); importing a root from a
// directory or an OCI image (a layout, a `docker save` or `podman save`
// archive: digests verified, whiteouts and hard links applied, setuid and
// setgid bits and device files stripped, absolute and ".." paths and
// symlinks out of the root refused, size and file count capped); and
// building one from a Debian package list with debootstrap, cached.
//
// A template's content is no more trusted than sandbox code. This package
// must never follow a symlink of a template on the host (paths are checked
// lexically and opened beneath the root, links are read, never resolved
// by the kernel), never leave a half-written version behind (imports go to
// a temporary directory renamed at the end), and never remove a version a
// process still holds. It knows nothing of sandboxes: jail and rootfs
// decide what of a root a sandbox sees.
package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// Template is one version of a template, as its meta.json records it.
type Template struct {
	Name    string    `json:"name"`
	Version string    `json:"version"`
	Created time.Time `json:"created"`
	// Source is what it was made from: "dir", "oci-layout",
	// "oci-archive", "docker-archive" or "debian".
	Source string `json:"source"`
	// From names it: the image file or directory's base name, or the
	// Debian suite.
	From string `json:"from,omitempty"`
	// Digest is the OCI manifest's digest (or a docker archive's config
	// digest); for a Debian build, the build's cache key.
	Digest string `json:"digest,omitempty"`
	// Packages are the Debian packages a build installed.
	Packages []string `json:"packages,omitempty"`
	// Size is the bytes of its files (hard links once); Files counts
	// its entries.
	Size  int64 `json:"size"`
	Files int64 `json:"files"`
	// Stripped counts what the import left out.
	Stripped Stripped `json:"stripped,omitzero"`
	// Runtimes maps the languages whose interpreter is in the root to
	// its path there.
	Runtimes map[string]string `json:"runtimes,omitempty"`
	// Env is the image's configured environment (shown, never applied:
	// sandboxes get airlock's).
	Env []string `json:"env,omitempty"`

	// Root is the host directory of the root filesystem.
	Root string `json:"-"`
}

// Interpreters are the paths airlock looks for each language's
// interpreter at in a template's root, in order (see runtimes): Debian's
// and most distributions' first, then /usr/local, where the official
// python and node images install theirs. A template runs a language when
// its root has one; its runtimes run that one.
var Interpreters = map[string][]string{
	"python":     {"/usr/bin/python3", "/usr/local/bin/python3"},
	"bash":       {"/usr/bin/bash", "/bin/bash"},
	"javascript": {"/usr/bin/node", "/usr/local/bin/node"},
}

// RuntimesConfig is base with the interpreters of the template's root in
// place of the host's.
func (t Template) RuntimesConfig(base config.Runtimes) config.Runtimes {
	for lang, p := range map[string]*string{"python": &base.Python, "bash": &base.Bash, "javascript": &base.Node} {
		if t.Runtimes[lang] != "" {
			*p = t.Runtimes[lang]
		}
	}
	return base
}

// Event is one step of a long operation, for a progress bar or a JSON
// line.
type Event struct {
	// Stage: "open", "layer", "files", "debootstrap", "apt", "cached",
	// "commit", "done".
	Stage   string `json:"stage"`
	Message string `json:"message,omitempty"`
	Layer   int    `json:"layer,omitempty"`
	Layers  int    `json:"layers,omitempty"`
	// Bytes written so far (uncompressed).
	Bytes int64 `json:"bytes,omitempty"`
	// Read is the bytes of an image read so far as it is stored
	// (compressed layers), of Total, the sum its manifest declares:
	// their ratio is the import's progress.
	Read  int64 `json:"read,omitempty"`
	Total int64 `json:"total,omitempty"`
}

// ErrNoTemplate: no template of that name.
var ErrNoTemplate = fmt.Errorf("%w: no such template", errdefs.ErrNotFound)

// CheckName checks a template's name (config.CheckTemplateName).
func CheckName(name string) error { return config.CheckTemplateName(name) }

// Resolve returns the path, inside root, that p (absolute, as the sandbox
// sees it) leads to once every symlink on the way is read, as the kernel
// would resolve it inside the sandbox: nothing is followed on the host,
// links are read with readlink and joined lexically. It fails on a
// missing file or more than 40 links.
func Resolve(root *os.Root, p string) (string, fs.FileInfo, error) {
	links := 0
	todo := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "."
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		st, err := root.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			if len(todo) > 0 && !st.IsDir() {
				return "", nil, fs.ErrNotExist
			}
			cur = next
			if len(todo) == 0 {
				return cur, st, nil
			}
			continue
		}
		if links++; links > 40 {
			return "", nil, errors.New("too many levels of symbolic links")
		}
		target, err := root.Readlink(next)
		if err != nil {
			return "", nil, err
		}
		if strings.HasPrefix(target, "/") {
			cur = "."
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	st, err := root.Lstat(cur)
	return cur, st, err
}

// Has reports whether the template's root has p (absolute, as the sandbox
// sees it) as a regular file, following its links inside the root.
func (t Template) Has(p string) bool {
	r, err := os.OpenRoot(t.Root)
	if err != nil {
		return false
	}
	defer r.Close()
	_, st, err := Resolve(r, p)
	return err == nil && st.Mode().IsRegular()
}

// Runs returns nil if the template's root has lang's interpreter, and
// otherwise an invalid-argument error saying so.
func (t Template) Runs(lang string) error {
	if t.Runtimes[lang] != "" {
		return nil
	}
	return fmt.Errorf("%w: template %q cannot run %s: its root has no %s (GET /v1/templates lists each template's languages)", errdefs.ErrInvalidArgument, t.Name, lang, strings.Join(Interpreters[lang], " or "))
}

// findRuntimes lists the languages whose interpreter root has.
func findRuntimes(t Template) map[string]string {
	out := map[string]string{}
	for lang, paths := range Interpreters {
		for _, p := range paths {
			if t.Has(p) {
				out[lang] = p
				break
			}
		}
	}
	return out
}
