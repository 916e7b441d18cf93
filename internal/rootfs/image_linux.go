package rootfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// imageTop are the top-level trees of a template's root a sandbox sees
// besides /usr: as directories (an image without merged /usr) they are
// bound, as symlinks they are made the same.
var imageTop = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// MaxImageBinds caps the trees of a template a sandbox mounts: each is a
// descriptor in the init's setup message, which takes 16.
const MaxImageBinds = 14

// ForImage returns base made into the spec of a root from the template
// root at image: its /usr, its /bin, /sbin and /lib* (bound when they are
// directories, linked when they are links), the directories of its /opt
// (but airlock's own /opt/airlock) and a copy of its /etc, with airlock's
// generated files over it. Nothing of the host's /usr or /etc is seen.
// image is only read: Lstat and Readlink, never a path through a link.
func ForImage(base Spec, image string) (Spec, error) {
	s := base
	s.Image = image
	s.EtcCopy, s.EtcBind = nil, nil
	s.ImageLinks = map[string]string{}
	s.ImageBinds = nil
	st, err := os.Lstat(path.Join(image, "usr"))
	if err != nil || !st.IsDir() {
		return s, fmt.Errorf("rootfs: the template has no /usr directory")
	}
	s.ImageBinds = append(s.ImageBinds, "usr")
	for _, name := range imageTop {
		st, err := os.Lstat(path.Join(image, name))
		switch {
		case err != nil:
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path.Join(image, name))
			if err != nil {
				return s, fmt.Errorf("rootfs: %w", err)
			}
			s.ImageLinks[name] = target
		case st.IsDir():
			s.ImageBinds = append(s.ImageBinds, name)
		}
	}
	if st, err := os.Lstat(path.Join(image, "opt")); err == nil && st.IsDir() {
		ents, err := os.ReadDir(path.Join(image, "opt"))
		if err != nil {
			return s, fmt.Errorf("rootfs: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != "airlock" {
				s.ImageBinds = append(s.ImageBinds, "opt/"+e.Name())
			}
		}
	}
	sort.Strings(s.ImageBinds)
	if len(s.ImageBinds) > MaxImageBinds {
		return s, fmt.Errorf("rootfs: the template has %d trees to mount (/usr, /lib..., the directories of /opt), more than %d", len(s.ImageBinds), MaxImageBinds)
	}
	return s, nil
}

// populateImage writes the image-dependent part of a template root: the
// top-level links, mount points for the bound trees, and /etc copied
// from the image (without the names airlock generates).
func populateImage(root string, s Spec) error {
	for _, name := range sortedKeys(s.ImageLinks) {
		if err := os.Symlink(s.ImageLinks[name], path.Join(root, name)); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	for _, b := range s.ImageBinds {
		if err := os.MkdirAll(path.Join(root, b), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	src, err := os.OpenRoot(s.Image)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	defer src.Close()
	if st, err := src.Lstat("etc"); err != nil || !st.IsDir() {
		return nil // no /etc of its own: airlock's generated one only
	}
	c := etcCopy{src: src, dst: path.Join(root, "etc"), skip: map[string]bool{"localtime": true}}
	for name := range s.Etc {
		c.skip[name] = true
	}
	return c.dir("etc", ".")
}

// etcCopy copies a template's /etc: directories, regular files (without
// setuid and setgid bits) and symlinks (as links: they are read inside
// the sandbox), within caps.
type etcCopy struct {
	src          *os.Root
	dst          string
	skip         map[string]bool // names directly in /etc
	files, bytes int64
}

const (
	maxEtcFiles = 20000
	maxEtcBytes = 64 << 20
)

func (c *etcCopy) dir(srcDir, rel string) error {
	f, err := c.src.OpenFile(srcDir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("rootfs: template /%s: %w", srcDir, err)
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("rootfs: template /%s: %w", srcDir, err)
	}
	for _, e := range ents {
		if rel == "." && c.skip[e.Name()] {
			continue
		}
		if c.files++; c.files > maxEtcFiles {
			return fmt.Errorf("rootfs: the template's /etc has more than %d files", maxEtcFiles)
		}
		sp, dp := path.Join(srcDir, e.Name()), path.Join(c.dst, rel, e.Name())
		info, err := c.src.Lstat(sp)
		if err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := c.src.Readlink(sp)
			if err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
			if err := os.Symlink(target, dp); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
		case info.IsDir():
			if err := os.Mkdir(dp, info.Mode().Perm()|0o700); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
			if err := c.dir(sp, path.Join(rel, e.Name())); err != nil {
				return err
			}
			if err := os.Chmod(dp, info.Mode().Perm()); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
		case info.Mode().IsRegular():
			if c.bytes += info.Size(); c.bytes > maxEtcBytes {
				return fmt.Errorf("rootfs: the template's /etc holds more than %d bytes", maxEtcBytes)
			}
			if err := c.file(sp, dp, info.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *etcCopy) file(sp, dp string, mode fs.FileMode) error {
	in, err := c.src.OpenFile(sp, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	_, err = io.Copy(out, io.LimitReader(in, maxEtcBytes))
	if err == nil {
		err = out.Chmod(mode)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rootfs: copy %s: %w", sp, err)
	}
	return nil
}

// OpenImageTrees makes, on the host, a detached read-only, nosuid, nodev
// mount of each of s.ImageBinds of s.Image, for the init to attach (see
// Spec.ImageTrees). Each directory is opened beneath the image without
// following any link (openat2), then cloned by descriptor (open_tree), so
// that no path of the template is ever resolved through a link of its
// own. A detached mount that is never attached goes with its descriptor.
func OpenImageTrees(s Spec) (_ []*os.File, err error) {
	dirfd, err := unix.Open(s.Image, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("rootfs: open template: %w", err)
	}
	defer unix.Close(dirfd)
	var trees []*os.File
	defer func() {
		if err != nil {
			for _, f := range trees {
				f.Close()
			}
		}
	}()
	for _, name := range s.ImageBinds {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil, fmt.Errorf("rootfs: template /%s: %w", name, err)
		}
		tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("rootfs: clone template /%s: %w", name, err)
		}
		f := os.NewFile(uintptr(tree), name)
		trees = append(trees, f)
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE,
			&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
			return nil, fmt.Errorf("rootfs: restrict template /%s: %w", name, err)
		}
	}
	return trees, nil
}

// attachImage attaches the detached mount tree (OpenImageTrees) onto dst
// and makes sure it is read-only, nosuid and nodev.
func attachImage(tree *os.File, dst string) error {
	if err := unix.MoveMount(int(tree.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("rootfs: mount template %s: %w", tree.Name(), err)
	}
	return setattr(dst, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}
