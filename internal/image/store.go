package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"airlock/internal/errdefs"
)

// Store keeps templates under one directory:
//
//	<dir>/.lock                     flock: held exclusively while versions come and go
//	<dir>/<name>/current            the current version's name
//	<dir>/<name>/<version>/meta.json
//	<dir>/<name>/<version>/rootfs/  the root filesystem
//	<dir>/.tmp-*/                   imports under way (flock on the directory)
//
// A version is immutable once renamed into place. A process using one
// holds a shared flock on its directory (Acquire); a version that is not
// current and that nobody holds is removed (gc).
type Store struct {
	dir string

	mu     sync.Mutex
	leases map[string]*held // version directory -> its shared lock
}

type held struct {
	f    *os.File
	refs int
}

// Open opens (creating it) the store at dir, a root-owned directory, and
// removes what an import killed half-way left.
func Open(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: template directory %q must be absolute", errdefs.ErrInvalidArgument, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: template directory: %v", errdefs.ErrUnavailable, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: template directory: %v", errdefs.ErrUnavailable, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: template directory %s must be a directory of this user's that nobody else may write", errdefs.ErrUnavailable, dir)
	}
	s := &Store{dir: dir, leases: map[string]*held{}}
	s.sweepTmp()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// lock takes the store's lock, exclusive or shared.
func (s *Store) lock(exclusive bool) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, ".lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepTmp removes the temporary directories of imports no process runs
// any more (their lock is free).
func (s *Store) sweepTmp() {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if !e.IsDir() || !(strings.HasPrefix(e.Name(), ".tmp-") || strings.HasPrefix(e.Name(), ".trash-")) {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		if f, ok := tryLock(p, true); ok {
			os.RemoveAll(p)
			f.Close()
		}
	}
}

// tryLock takes a flock on the directory p without waiting.
func tryLock(p string, exclusive bool) (*os.File, bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	how := unix.LOCK_SH | unix.LOCK_NB
	if exclusive {
		how = unix.LOCK_EX | unix.LOCK_NB
	}
	if unix.Flock(int(f.Fd()), how) != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

func (s *Store) current(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, name, "current"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w %q (airlock template list shows them)", ErrNoTemplate, name)
	}
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if !validVersion(v) {
		return "", fmt.Errorf("%w: template %q: bad current version %q", errdefs.ErrUnavailable, name, trimName(v))
	}
	return v, nil
}

func validVersion(v string) bool {
	if len(v) < 8 || len(v) > 64 || v[0] == '.' {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == 'T' || c == 'Z') {
			return false
		}
	}
	return true
}

func (s *Store) meta(name, version string) (Template, error) {
	var t Template
	dir := filepath.Join(s.dir, name, version)
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return t, fmt.Errorf("%w: template %q version %s: %v", errdefs.ErrUnavailable, name, version, err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%w: template %q version %s: %v", errdefs.ErrUnavailable, name, version, err)
	}
	t.Name, t.Version, t.Root = name, version, filepath.Join(dir, "rootfs")
	return t, nil
}

// Get returns the current version of the template name.
func (s *Store) Get(name string) (Template, error) {
	if err := CheckName(name); err != nil {
		return Template{}, err
	}
	l, err := s.lock(false)
	if err != nil {
		return Template{}, err
	}
	defer l.Close()
	v, err := s.current(name)
	if err != nil {
		return Template{}, err
	}
	return s.meta(name, v)
}

// List returns the current version of every template, by name.
func (s *Store) List() ([]Template, error) {
	l, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []Template
	for _, e := range ents {
		if !e.IsDir() || CheckName(e.Name()) != nil {
			continue
		}
		v, err := s.current(e.Name())
		if errors.Is(err, ErrNoTemplate) {
			continue // removed; versions still in use
		}
		if err != nil {
			return nil, err
		}
		t, err := s.meta(e.Name(), v)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Versions lists the versions of name on disk (the current one and older
// ones still in use), oldest first.
func (s *Store) Versions(name string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, name))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && validVersion(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Lease is a version of a template held for use: it is not removed until
// Release, even if a newer version is imported or the template removed.
type Lease struct {
	Template
	s    *Store
	key  string
	once sync.Once
}

// Acquire holds the current version of name.
func (s *Store) Acquire(name string) (*Lease, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	l, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	v, err := s.current(name)
	if err != nil {
		return nil, err
	}
	t, err := s.meta(name, v)
	if err != nil {
		return nil, err
	}
	key := filepath.Join(s.dir, name, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.leases[key]
	if h == nil {
		f, ok := tryLock(key, false)
		if !ok {
			return nil, fmt.Errorf("%w: template %q version %s cannot be held", errdefs.ErrUnavailable, name, v)
		}
		h = &held{f: f}
		s.leases[key] = h
	}
	h.refs++
	return &Lease{Template: t, s: s, key: key}, nil
}

// Clone holds the same version once more (a sandbox made from a pool's
// version holds it for as long as it lives); release each separately.
func (l *Lease) Clone() *Lease {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.leases[l.key]; h != nil {
		h.refs++
	} else {
		panic("image: Clone of a released lease")
	}
	return &Lease{Template: l.Template, s: s, key: l.key}
}

// Release lets the version go; once nothing holds it and it is no longer
// current, it is removed. It may be called more than once.
func (l *Lease) Release() {
	l.once.Do(func() {
		s := l.s
		s.mu.Lock()
		h := s.leases[l.key]
		last := false
		if h != nil {
			if h.refs--; h.refs == 0 {
				delete(s.leases, l.key)
				h.f.Close()
				last = true
			}
		}
		s.mu.Unlock()
		if last {
			s.gc(l.Name)
		}
	})
}

// gc removes the versions of name that are not current and that no
// process holds, and name's directory once it has none.
func (s *Store) gc(name string) (kept []string) {
	l, err := s.lock(true)
	if err != nil {
		return nil
	}
	defer l.Close()
	cur, _ := s.current(name)
	vs, _ := s.Versions(name)
	for _, v := range vs {
		if v == cur {
			continue
		}
		p := filepath.Join(s.dir, name, v)
		s.mu.Lock()
		_, ours := s.leases[p]
		s.mu.Unlock()
		f, ok := tryLock(p, true)
		if ours || !ok {
			kept = append(kept, v)
			continue
		}
		// Out of the store's namespace first: a crash half-way leaves a
		// .trash- directory that the next Open removes.
		trash := filepath.Join(s.dir, ".trash-"+randomID())
		if os.Rename(p, trash) == nil {
			os.RemoveAll(trash)
		}
		f.Close()
	}
	if cur == "" && len(kept) == 0 {
		os.Remove(filepath.Join(s.dir, name))
	}
	return kept
}

// GC removes every version nothing holds that is not current.
func (s *Store) GC() {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if e.IsDir() && CheckName(e.Name()) == nil {
			s.gc(e.Name())
		}
	}
}

// Remove removes the template name: it is gone for new sandboxes at once;
// a version a running sandbox holds stays on disk until it is released.
// It returns those versions.
func (s *Store) Remove(name string) ([]string, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	l, err := s.lock(true)
	if err != nil {
		return nil, err
	}
	if _, err := s.current(name); err != nil {
		l.Close()
		return nil, err
	}
	err = os.Remove(filepath.Join(s.dir, name, "current"))
	l.Close()
	if err != nil {
		return nil, err
	}
	return s.gc(name), nil
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newVersion names a new version: its time, then randomness (sorted by
// time, never reused).
func newVersion() string {
	return strings.ToLower(time.Now().UTC().Format("20060102t150405z")) + "-" + randomID()
}

// staging is an import under way: a temporary directory of the store,
// locked so that no sweep removes it, holding rootfs/ and meta.json.
type staging struct {
	dir  string
	lock *os.File
}

func (s *Store) stage() (*staging, error) {
	dir, err := os.MkdirTemp(s.dir, ".tmp-")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	f, ok := tryLock(dir, true)
	if !ok {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: cannot lock %s", errdefs.ErrUnavailable, dir)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	os.Chmod(dir, 0o755)
	return &staging{dir: dir, lock: f}, nil
}

// abort removes everything the import wrote.
func (st *staging) abort() {
	os.RemoveAll(st.dir)
	st.lock.Close()
}

// commit makes the staged root the current version of name.
func (s *Store) commit(st *staging, t Template) (Template, error) {
	t.Version = newVersion()
	t.Created = time.Now().UTC().Truncate(time.Second)
	t.Root = filepath.Join(st.dir, "rootfs")
	t.Runtimes = findRuntimes(t)
	size, files, err := du(t.Root)
	if err != nil {
		return t, err
	}
	t.Size, t.Files = size, files
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return t, err
	}
	if err := os.WriteFile(filepath.Join(st.dir, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return t, err
	}
	l, err := s.lock(true)
	if err != nil {
		return t, err
	}
	defer l.Close()
	if err := os.MkdirAll(filepath.Join(s.dir, t.Name), 0o755); err != nil {
		return t, err
	}
	final := filepath.Join(s.dir, t.Name, t.Version)
	if err := os.Rename(st.dir, final); err != nil {
		return t, err
	}
	cur := filepath.Join(s.dir, t.Name, "current")
	if err := os.WriteFile(cur+".new", []byte(t.Version+"\n"), 0o644); err == nil {
		err = os.Rename(cur+".new", cur)
	}
	if err != nil {
		os.RemoveAll(final)
		return t, err
	}
	st.lock.Close()
	t.Root = filepath.Join(final, "rootfs")
	return t, nil
}

// du sums the sizes of the regular files under dir (each inode once) and
// counts its entries, without following links.
func du(dir string) (size, files int64, err error) {
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		files++
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if sys, ok := info.Sys().(*syscall.Stat_t); ok {
			if seen[sys.Ino] {
				return nil
			}
			seen[sys.Ino] = true
			size += sys.Blocks * 512
			return nil
		}
		size += info.Size()
		return nil
	})
	return size, files - 1, err
}

// ImportOptions say how to import.
type ImportOptions struct {
	// Ref picks one image of an archive or layout holding several.
	Ref string
	// Limits bound the import (DefaultLimits when zero).
	Limits Limits
	// Progress hears each step (may be nil).
	Progress func(Event)
	// as describes a directory import as what it was built from.
	as *Template
}

// Import imports src as a new version of the template name: a directory
// holding a root filesystem, an OCI layout directory (it has an oci-layout
// file), or a docker-archive or OCI archive tar. Nothing is left behind
// when it fails or ctx ends.
func (s *Store) Import(ctx context.Context, name, src string, o ImportOptions) (Template, error) {
	if err := CheckName(name); err != nil {
		return Template{}, err
	}
	if o.Limits == (Limits{}) {
		o.Limits = DefaultLimits()
	}
	progress := o.Progress
	if progress == nil {
		progress = func(Event) {}
	}
	st, err := os.Stat(src)
	if err != nil {
		return Template{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	stg, err := s.stage()
	if err != nil {
		return Template{}, err
	}
	t := Template{Name: name, From: filepath.Base(src)}
	err = func() error {
		a, err := newApplier(filepath.Join(stg.dir, "rootfs"), o.Limits)
		if err != nil {
			return err
		}
		defer a.close()
		a.onBytes = throttle(func(n int64) { progress(Event{Stage: "files", Bytes: n}) })
		if st.IsDir() && !isLayout(src) {
			t.Source = "dir"
			progress(Event{Stage: "files", Message: "copying " + filepath.Base(src)})
			err = applyDir(ctx, a, src)
		} else {
			t, err = s.importOCI(ctx, a, t, src, o, progress)
		}
		t.Stripped = a.strip
		if o.as != nil {
			t.Source, t.From, t.Digest, t.Packages = o.as.Source, o.as.From, o.as.Digest, o.as.Packages
		}
		return err
	}()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		stg.abort()
		return Template{}, err
	}
	progress(Event{Stage: "commit"})
	t, err = s.commit(stg, t)
	if err != nil {
		stg.abort()
		return Template{}, err
	}
	s.gc(name)
	progress(Event{Stage: "done", Bytes: t.Size})
	return t, nil
}

func isLayout(dir string) bool {
	st, err := os.Lstat(filepath.Join(dir, "oci-layout"))
	return err == nil && st.Mode().IsRegular()
}

func (s *Store) importOCI(ctx context.Context, a *applier, t Template, src string, o ImportOptions, progress func(Event)) (Template, error) {
	progress(Event{Stage: "open", Message: filepath.Base(src)})
	img, err := openOCI(src, o.Ref, s.dir)
	if err != nil {
		return t, err
	}
	defer img.cleanup()
	info, err := img.check(o.Limits)
	if err != nil {
		return t, err
	}
	t.Source, t.Digest, t.Env = img.kind, info.Digest, info.Config.Config.Env
	if err := checkArch(info.Config.Architecture); err != nil {
		return t, err
	}
	return t, img.unpack(ctx, a, info, progress)
}

// throttle calls f at most once per 16 MiB of progress.
func throttle(f func(int64)) func(int64) {
	var last int64
	return func(n int64) {
		if n-last >= 16<<20 {
			last = n
			f(n)
		}
	}
}
