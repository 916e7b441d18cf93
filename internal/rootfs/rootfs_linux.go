package rootfs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Build assembles the root under s.Staging and pivots into it. It must be
// called by the sandbox init, in a fresh mount namespace of its own user
// namespace, inside the sandbox's pid namespace (so that /proc shows it).
func Build(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	// Nothing done here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("rootfs: make / private: %w", err)
	}
	root := s.Staging
	if s.Template == "" {
		return fmt.Errorf("rootfs: no template (PrepareTemplate writes it)")
	}
	// The static part was written once by the host: bind it read-only.
	if err := unix.Mount(s.Template, root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("rootfs: bind template: %w", err)
	}
	if err := setattr(root, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	if s.Image != "" {
		// A template's trees instead of the host's /usr and /etc (its
		// /etc is a copy in the static part).
		if len(s.ImageTrees) != len(s.ImageBinds) {
			return fmt.Errorf("rootfs: %d template mounts for %d trees", len(s.ImageTrees), len(s.ImageBinds))
		}
		for i, b := range s.ImageBinds {
			err := attachImage(s.ImageTrees[i], path.Join(root, b))
			s.ImageTrees[i].Close()
			if err != nil {
				return err
			}
		}
	} else {
		if err := bindReadOnly("/usr", path.Join(root, "usr"), true); err != nil {
			return err
		}
		if err := bindEtc(root, s); err != nil {
			return err
		}
	}
	if err := buildDev(root, s); err != nil {
		return err
	}
	if !s.NoProc {
		if err := buildProc(root); err != nil {
			return err
		}
	}
	scratch := scratchOptions(s.Disk, s.Inodes)
	if err := mountTmpfs(path.Join(root, "workspace"), workspaceFlags,
		fmt.Sprintf("%s,mode=0755,uid=%d,gid=%d", scratch, s.UID, s.GID)); err != nil {
		return err
	}
	// E2B's home: the same directory as /workspace (one tmpfs, two
	// names), with the same restrictions.
	if err := bindScratch(path.Join(root, "workspace"), path.Join(root, HomeAlias)); err != nil {
		return err
	}
	if err := mountTmpfs(path.Join(root, "tmp"), tmpFlags, scratch+",mode=1777"); err != nil {
		return err
	}
	for _, name := range sortedKeys(s.TmpCopy) {
		if err := copyDir(s.TmpCopy[name], path.Join(root, "tmp", name), s.UID, s.GID); err != nil {
			return err
		}
	}

	// pivot_root(".", ".") stacks the old root under the new one; the
	// detach then drops every host mount from this namespace.
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("rootfs: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("rootfs: detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}

// populate writes the static part of the root into root: mount points,
// the merged-/usr links, /etc (generated, copied from the host, and mount
// points for the bound directories) and the extra files.
func populate(root string, s Spec) error {
	for _, d := range []string{"usr", "etc", "dev", "proc", "tmp", "workspace", "opt", "run", "home", HomeAlias[1:]} {
		if err := os.Mkdir(path.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	if s.Image != "" {
		if err := populateImage(root, s); err != nil {
			return err
		}
	}
	for _, l := range []struct{ name, target string }{
		{"bin", "usr/bin"}, {"sbin", "usr/sbin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}, {"lib32", "usr/lib32"}, {"libx32", "usr/libx32"},
	} {
		if s.Image != "" {
			break // the template's own, above
		}
		// Merged-/usr links, only where the host has the target.
		if _, err := os.Stat("/" + l.target); err != nil {
			continue
		}
		if err := os.Symlink(l.target, path.Join(root, l.name)); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	etc := path.Join(root, "etc")
	for _, name := range sortedKeys(s.Etc) {
		if err := writeFile(path.Join(etc, name), s.Etc[name]); err != nil {
			return err
		}
	}
	for _, name := range s.EtcCopy {
		src, err := os.Open(path.Join("/etc", name))
		if err != nil {
			continue // optional
		}
		err = copyFile(src, path.Join(etc, name), 0o644, -1, -1)
		src.Close()
		if err != nil {
			return err
		}
	}
	for _, name := range s.EtcBind {
		if st, err := os.Stat(path.Join("/etc", name)); err == nil && st.IsDir() {
			if err := os.MkdirAll(path.Join(etc, name), 0o755); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
		}
	}
	if err := os.Symlink("/usr/share/zoneinfo/Etc/UTC", path.Join(etc, "localtime")); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	for _, p := range sortedKeys(s.Files) {
		dst := path.Join(root, p)
		if err := os.MkdirAll(path.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(s.Files[p], "#!") {
			mode = 0o755 // a script: the command it is runs it
		}
		if err := os.WriteFile(dst, []byte(s.Files[p]), mode); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	return nil
}

// The scratch mounts' flags, for Build and ResizeScratch alike: a remount
// replaces every flag, and must not drop one. /tmp is executable like
// /workspace: code that can write /workspace can already run what it
// writes, and noexec on /tmp only broke real programs (scripts and
// shutil.which in /tmp, PROT_EXEC maps of its files) without protecting
// anything.
const (
	workspaceFlags = unix.MS_NOSUID | unix.MS_NODEV
	tmpFlags       = unix.MS_NOSUID | unix.MS_NODEV
)

func scratchOptions(disk, inodes int64) string {
	return fmt.Sprintf("size=%d,nr_inodes=%d", disk, inodes)
}

// ResizeScratch gives the (empty) /workspace and /tmp of the sandbox this
// process has pivoted into new sizes.
func ResizeScratch(disk, inodes int64) error {
	opts := scratchOptions(disk, inodes)
	for dir, flags := range map[string]uintptr{"/workspace": workspaceFlags, "/tmp": tmpFlags} {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|flags, opts); err != nil {
			return fmt.Errorf("resize %s: %w", dir, err)
		}
	}
	return nil
}

// PrepareTemplate writes the static part of the root once, into a
// directory under dir named after a hash of what goes in it, and returns
// its path. Sandboxes bind it read-only instead of writing it each time.
// Concurrent callers agree on the same directory; a change on the host (a
// copied /etc file) or in the spec gives a new one.
func PrepareTemplate(dir string, s Spec) (string, error) {
	h := sha256.New()
	io.WriteString(h, "airlock-rootfs-v3\x00")
	for _, k := range sortedKeys(s.Etc) {
		fmt.Fprintf(h, "etc %q %q\n", k, s.Etc[k])
	}
	for _, name := range s.EtcCopy {
		if st, err := os.Stat(path.Join("/etc", name)); err == nil {
			sys := st.Sys().(*syscall.Stat_t)
			fmt.Fprintf(h, "copy %q %d %d %d\n", name, st.Size(), st.ModTime().UnixNano(), sys.Ino)
		}
	}
	for _, name := range s.EtcBind {
		if st, err := os.Stat(path.Join("/etc", name)); err == nil && st.IsDir() {
			fmt.Fprintf(h, "bind %q\n", name)
		}
	}
	for _, l := range []string{"usr/lib64", "usr/lib32", "usr/libx32"} {
		if _, err := os.Stat("/" + l); err == nil {
			fmt.Fprintf(h, "link %q\n", l)
		}
	}
	for _, k := range sortedKeys(s.Files) {
		// The content as it is, after its length: quoting a few hundred
		// KB of runtime files costs every command milliseconds.
		fmt.Fprintf(h, "file %q %d\n", k, len(s.Files[k]))
		io.WriteString(h, s.Files[k])
	}
	if s.LoadFiles != nil {
		fmt.Fprintf(h, "files %q\n", s.FilesKey)
	}
	if s.PrepareKey != "" {
		fmt.Fprintf(h, "prepare %q\n", s.PrepareKey)
	}
	// A template's version directory never changes once made.
	if s.Image != "" {
		fmt.Fprintf(h, "image %q %q %q\n", s.Image, s.ImageBinds, s.ImageLinks)
	}
	final := path.Join(dir, fmt.Sprintf("rootfs-%x", h.Sum(nil)[:12]))
	// Leased before it is looked at: no sweep removes it from now on.
	if err := lease(final); err != nil {
		return "", err
	}
	if st, err := os.Lstat(final); err == nil && st.IsDir() {
		// Fresh again: SweepTemplates spares what was used in the last
		// minute, and this one is about to be mounted.
		now := time.Now()
		os.Chtimes(final, now, now)
		return final, nil
	}
	tmp, err := os.MkdirTemp(dir, ".rootfs-")
	if err != nil {
		return "", fmt.Errorf("rootfs: template: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("rootfs: template: %w", err)
	}
	if s.LoadFiles != nil {
		s.Files = s.AllFiles()
	}
	if err := populate(tmp, s); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if s.Prepare != nil {
		if err := s.Prepare(tmp); err != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("rootfs: template: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		if st, err2 := os.Lstat(final); err2 == nil && st.IsDir() {
			return final, nil // another process made the same one first
		}
		return "", fmt.Errorf("rootfs: template: %w", err)
	}
	return final, nil
}

// SweepTemplates removes the templates in dir other than keep: those of
// earlier airlock versions or host configurations, and half-written ones
// of a process that died. A template some live process leases (see
// lease: a server or run of any version, however idle), one a sandbox
// still has as its root (an `airlock run` of a version before leases),
// or one made in the last minute is left alone.
func SweepTemplates(dir, keep string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	var used map[string]bool
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	for _, e := range ents {
		name := e.Name()
		p := path.Join(dir, name)
		if isLease(name) && !names[strings.TrimSuffix(name, leaseSuffix)] {
			// Its template is gone (a sweep that died midway).
			if release, ok := claim(strings.TrimSuffix(p, leaseSuffix)); ok {
				release()
			}
			continue
		}
		if !e.IsDir() || p == keep ||
			!(strings.HasPrefix(name, "rootfs-") || strings.HasPrefix(name, ".rootfs-")) {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		release := func() {}
		if strings.HasPrefix(name, "rootfs-") {
			var ok bool
			if release, ok = claim(p); !ok {
				continue // a live process uses it
			}
		}
		if used == nil {
			used = mountedTemplates()
		}
		if used[name] {
			release()
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
		release()
	}
	return errors.Join(errs...)
}

// mountedTemplates names the templates some process has mounted (in any
// mount namespace): the root field of a mountinfo line is the path of the
// mount's source within its filesystem.
func mountedTemplates() map[string]bool {
	used := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(path.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			for _, part := range strings.Split(f[3], "/") {
				if strings.HasPrefix(part, "rootfs-") {
					used[part] = true
				}
			}
		}
	}
	return used
}

// bindEtc binds the host's /etc directories (certificates, fonts,
// alternatives...) read-only onto their mount points.
func bindEtc(root string, s Spec) error {
	for _, name := range s.EtcBind {
		src := path.Join("/etc", name)
		st, err := os.Stat(src)
		if err != nil || !st.IsDir() {
			continue // optional
		}
		dst := path.Join(root, "etc", name)
		if _, err := os.Lstat(dst); err != nil {
			continue // appeared after the template was made
		}
		if err := bindReadOnly(src, dst, false); err != nil {
			return err
		}
	}
	return nil
}

func buildDev(root string, s Spec) error {
	dev := path.Join(root, "dev")
	// nodev too: the device nodes below are bind mounts with flags of
	// their own, so the tmpfs itself never needs device semantics.
	if err := mountTmpfs(dev, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return err
	}
	for _, d := range Devices {
		dst := path.Join(dev, d)
		if err := writeFile(dst, ""); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("rootfs: bind /dev/%s: %w", d, err)
		}
		// Device nodes need dev semantics; everything else is nodev.
		if err := setattr(dst, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	if err := mountPts(dev, s.Ptys); err != nil {
		return err
	}
	for _, l := range []struct{ name, target string }{
		{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
		{"ptmx", "pts/ptmx"},
	} {
		if err := os.Symlink(l.target, path.Join(dev, l.name)); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	shm := path.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	// Executable for the same reason as /tmp (JITs and libffi map their
	// files here with PROT_EXEC).
	if err := mountTmpfs(shm, unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777", s.Shm, s.Inodes)); err != nil {
		return err
	}
	// /dev itself is read-only once populated.
	return setattr(dev, false, unix.MOUNT_ATTR_RDONLY)
}

// mountPts gives the sandbox a devpts instance of its own, so that
// os.openpty, pty.spawn, script, pexpect and terminal programs work. With
// newinstance it shares no pty with the host or another sandbox: its
// /dev/pts lists only the sandbox's own terminals, and /dev/ptmx is a
// symlink to this instance's ptmx. Slaves get the creating user's group
// (no tty group is mapped); the mount is nosuid and noexec, and keeps dev
// semantics, which a pty needs. With max set, the instance holds at most
// that many: a sandbox that opens them all exhausts only its own (the
// host's terminal commands open theirs here too, see jail.Sandbox.OpenPTY).
func mountPts(dev string, max int) error {
	pts := path.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	opts := "newinstance,ptmxmode=0666,mode=0620"
	if max > 0 {
		opts += ",max=" + strconv.Itoa(max)
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("rootfs: mount devpts: %w", err)
	}
	return nil
}

func buildProc(root string) error {
	proc := path.Join(root, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("rootfs: mount proc: %w", err)
	}
	null := path.Join(root, "dev", "null")
	for _, f := range MaskedFiles {
		dst := path.Join(proc, f)
		if _, err := os.Lstat(dst); err != nil {
			continue
		}
		if err := unix.Mount(null, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("rootfs: mask /proc/%s: %w", f, err)
		}
		if err := setattr(dst, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC); err != nil {
			return err
		}
	}
	for _, d := range MaskedDirs {
		dst := path.Join(proc, d)
		if st, err := os.Lstat(dst); err != nil || !st.IsDir() {
			continue
		}
		if err := mountTmpfs(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return err
		}
	}
	for _, d := range ReadOnlyProc {
		dst := path.Join(proc, d)
		if _, err := os.Lstat(dst); err != nil {
			continue
		}
		if err := bindReadOnly(dst, dst, true); err != nil {
			return err
		}
	}
	return nil
}

func mountTmpfs(dst string, flags uintptr, data string) error {
	if err := unix.Mount("tmpfs", dst, "tmpfs", flags, data); err != nil {
		return fmt.Errorf("rootfs: mount tmpfs on %s: %w", dst, err)
	}
	return nil
}

// bindScratch binds the scratch tree src onto dst: writable like src,
// never suid or device files.
func bindScratch(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("rootfs: bind %s: %w", src, err)
	}
	return setattr(dst, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// bindReadOnly binds src onto dst and makes it (and, if rec, every mount
// below it) read-only, nosuid and nodev.
func bindReadOnly(src, dst string, rec bool) error {
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("rootfs: bind %s: %w", src, err)
	}
	return setattr(dst, rec, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// setattr only ever adds restrictions; flags locked by the host stay.
func setattr(name string, rec bool, set uint64) error {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if rec {
		flags |= unix.AT_RECURSIVE
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, name, uint(flags), &unix.MountAttr{Attr_set: set}); err != nil {
		return fmt.Errorf("rootfs: restrict %s: %w", name, err)
	}
	return nil
}

func writeFile(name, content string) error {
	if err := os.MkdirAll(path.Dir(name), 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("rootfs: %w", err)
	}
	return f.Close()
}

func copyFile(src *os.File, dst string, mode os.FileMode, uid, gid int) error {
	st, err := src.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > 64<<20 {
		return nil // only plain files of sane size
	}
	if err := os.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	_, err = io.Copy(out, src)
	if err == nil && uid >= 0 {
		err = out.Chown(uid, gid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rootfs: copy to %s: %w", dst, err)
	}
	return nil
}

// copyDir copies the regular files directly in src into dst, owned by
// uid:gid. Sub-directories and anything else are ignored.
func copyDir(src, dst string, uid, gid int) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := os.Chown(dst, uid, gid); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(path.Join(src, e.Name()), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		err = copyFile(f, path.Join(dst, e.Name()), 0o644, uid, gid)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Hostname sets the UTS hostname.
func Hostname(name string) error {
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("rootfs: sethostname: %w", err)
	}
	return nil
}
