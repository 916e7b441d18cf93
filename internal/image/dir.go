package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"airlock/internal/errdefs"
)

// applyDir copies the root filesystem in the host directory src through
// the same checks as an image layer: it is written as a tar stream that
// the applier reads, so a directory gets exactly an image's treatment.
// src is walked without following links; its files are opened with
// O_NOFOLLOW and O_NONBLOCK (one swapped for a fifo meanwhile must not
// hang the import: the open returns, and the check after it refuses).
func applyDir(ctx context.Context, a *applier, src string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeDirTar(ctx, pw, src)) }()
	err := a.apply(ctx, pr)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if apply failed
	return err
}

func writeDirTar(ctx context.Context, w io.Writer, src string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		h, err := tar.FileInfoHeader(info, target)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = filepath.ToSlash(rel), "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		var f *os.File
		if info.Mode().IsRegular() {
			sys := info.Sys().(*syscall.Stat_t)
			key := [2]uint64{sys.Dev, sys.Ino}
			if first, ok := links[key]; ok && sys.Nlink > 1 {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[key] = h.Name
				if f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0); err != nil {
					return err
				}
				defer f.Close()
				st, err := f.Stat()
				if err != nil || !os.SameFile(st, info) {
					return fmt.Errorf("%s changed while it was read", rel)
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if f != nil {
			if _, err := io.CopyN(tw, f, h.Size); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// checkArch refuses an image for another processor than this host's.
func checkArch(arch string) error {
	if arch == "" || arch == runtime.GOARCH {
		return nil
	}
	return fmt.Errorf("%w: the image is for %s; this host runs %s", errdefs.ErrInvalidArgument, arch, runtime.GOARCH)
}
