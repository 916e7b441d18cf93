package runtimes

import (
	"embed"
	"io/fs"
	"path"
)

//go:embed python/*.py javascript/*.js bash/*.sh
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
