package session

import (
	"context"
	"io"
	"os"
	"time"

	"airlock/internal/workspace"
)

// Files is a session's /workspace as clients reach it. Every operation is
// reported to the manager's observers; the rest is the workspace's (which
// never follows a link out of it).
type Files struct {
	s   *Session
	who Caller
}

// Files returns the session's files, for the caller ctx carries.
func (s *Session) Files(ctx context.Context) Files { return Files{s, s.callerOf(ctx)} }

func (f Files) report(op, path string, n int64, start time.Time, err error) {
	if obs := f.s.m.obs; obs != nil {
		obs.FileTransferred(FileEvent{Caller: f.who, Session: f.s.id, Op: op, Path: path, Bytes: n, Duration: time.Since(start), Err: err})
	}
}

// done asks for a recovery point of the files a change (err nil) left.
func (f Files) done(err error) {
	if err == nil {
		f.s.live.request(time.Now())
	}
}

// Write writes the file at p from r, at most max bytes.
func (f Files) Write(p string, r io.Reader, max int64, mode os.FileMode) (int64, error) {
	start := time.Now()
	// After the transfer's Use: a pause either sees it or is seen.
	if err := f.s.notPausing(); err != nil {
		return 0, err
	}
	n, err := f.s.workspace().Write(p, r, max, mode)
	f.done(err)
	f.report(FileUpload, p, n, start, err)
	return n, err
}

// Open opens the regular file at p for reading; its download is reported
// when it is closed.
func (f Files) Open(p string) (io.ReadSeekCloser, workspace.Entry, error) {
	start := time.Now()
	file, e, err := f.s.workspace().Open(p)
	if err != nil {
		f.report(FileDownload, p, 0, start, err)
		return nil, e, err
	}
	if f.s.m.obs == nil {
		return file, e, nil // as is: a response can send it with sendfile
	}
	return &download{file: file, f: f, path: p, start: start}, e, nil
}

// download counts what is read of a file until it is closed. (It does not
// embed the file: a promoted WriteTo would copy around the count.)
type download struct {
	file  *os.File
	f     Files
	path  string
	start time.Time
	n     int64
}

func (d *download) Read(p []byte) (int, error) {
	n, err := d.file.Read(p)
	d.n += int64(n)
	return n, err
}

func (d *download) Seek(offset int64, whence int) (int64, error) { return d.file.Seek(offset, whence) }

func (d *download) Close() error {
	err := d.file.Close()
	d.f.report(FileDownload, d.path, d.n, d.start, nil)
	return err
}

// List lists the directory dir (the workspace for ""), recursively or not.
func (f Files) List(dir string, recursive bool) ([]workspace.Entry, bool, error) {
	start := time.Now()
	entries, truncated, err := f.s.workspace().List(dir, recursive)
	f.report(FileList, dir, 0, start, err)
	return entries, truncated, err
}

// Remove removes p (a directory only if recursive, or empty).
func (f Files) Remove(p string, recursive bool) error {
	start := time.Now()
	if err := f.s.notPausing(); err != nil {
		return err
	}
	err := f.s.workspace().Remove(p, recursive)
	f.done(err)
	f.report(FileRemove, p, 0, start, err)
	return err
}

// Stat describes p without following a symlink.
func (f Files) Stat(p string) (workspace.Entry, error) { return f.s.workspace().Stat(p) }

// Mkdir makes the directory p and its missing parents.
func (f Files) Mkdir(p string) error {
	start := time.Now()
	err := f.s.workspace().Mkdir(p)
	f.done(err)
	f.report(FileMkdir, p, 0, start, err)
	return err
}

// Move renames from to to, replacing a file there.
func (f Files) Move(from, to string) error {
	start := time.Now()
	err := f.s.workspace().Rename(from, to)
	f.done(err)
	f.report(FileMove, from+" -> "+to, 0, start, err)
	return err
}
