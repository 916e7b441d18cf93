package runtimes

import (
	"embed"
	"io/fs"
	"path"
)

// The Python runtime is a package: its directory is named file by file
// (a directory pattern would leave out __init__.py and __main__.py, as it
// does every name starting with _ or .), and python/tests is not shipped;
// nor are javascript/tests, nor the record of the vendored acorn.
//
//go:embed python/*.py python/airlock_runtime/*.py python/airlock_runtime/magics/*.py
//go:embed javascript/*.js javascript/acorn/acorn.js javascript/acorn/LICENSE bash/*.sh
var files embed.FS

// RootFiles are the session runtimes, placed read-only under RuntimeDir in
// every sandbox (path -> content). Tests are not shipped.
func RootFiles() map[string]string {
	out := map[string]string{}
	fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err == nil {
			out[path.Join(RuntimeDir, p)] = string(b)
		}
		return err
	})
	return out
}
