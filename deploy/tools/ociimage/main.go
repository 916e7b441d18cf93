// Command ociimage writes and reads airlock's container image without a
// container engine: deploy/image/build.sh uses it to turn a debootstrapped
// root and the airlock binary into layers and an image archive, and the
// image test uses it to unpack that archive again.
//
//	ociimage layer  -dir DIR -out LAYER.tar.gz [-epoch N]
//	ociimage image  -out IMAGE.tar -tag NAME:TAG [-epoch N] [-entrypoint JSON] [-cmd JSON] [-env K=V]... [-label K=V]... [-port P/tcp]... [-history TEXT]... LAYER.tar.gz...
//	ociimage unpack -image IMAGE.tar -dir DIR
//
// The archive is an OCI image layout (index.json, oci-layout, blobs/) that
// also carries Docker's manifest.json, the same shape `docker save` writes
// since Docker 25, so `docker load`, `podman load`, `ctr images import` and
// `skopeo copy oci-archive:` all take it. Layers and the archive are
// byte-for-byte reproducible: entries sorted, times clamped to -epoch,
// owners numeric.
//
// It lives in the deploy tools module, never in airlock's own: airlock's
// binary must not grow an image library.
package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "layer":
		err = cmdLayer(os.Args[2:])
	case "image":
		err = cmdImage(os.Args[2:])
	case "unpack":
		err = cmdUnpack(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: ociimage layer|image|unpack [flags] (see the package comment)")
	os.Exit(2)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// cmdLayer writes DIR as one gzip-compressed layer.
func cmdLayer(args []string) error {
	fl := flag.NewFlagSet("layer", flag.ExitOnError)
	dir := fl.String("dir", "", "directory whose contents become the layer")
	out := fl.String("out", "", "layer file to write (.tar.gz)")
	epoch := fl.Int64("epoch", 0, "latest modification time in the layer (SOURCE_DATE_EPOCH)")
	fl.Parse(args)
	if *dir == "" || *out == "" || fl.NArg() != 0 {
		return errors.New("layer: -dir and -out are required")
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zw, _ := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	n, err := writeTree(zw, *dir, time.Unix(*epoch, 0).UTC())
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	st, _ := os.Stat(*out)
	fmt.Printf("layer %s: %d entries, %s compressed\n", *out, n, mib(st.Size()))
	return nil
}

// writeTree writes the tree under root as a tar stream: sorted, numeric
// owners, hard links kept, times clamped to epoch. Sockets are skipped.
func writeTree(w io.Writer, root string, epoch time.Time) (int, error) {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = int(st.Uid), int(st.Gid), "", ""
		h.ModTime = fi.ModTime().UTC()
		if h.ModTime.After(epoch) {
			h.ModTime = epoch
		}
		h.ModTime = h.ModTime.Truncate(time.Second)
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if caps, err := lgetxattr(p, "security.capability"); err == nil && len(caps) > 0 {
			h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(caps)}
		}
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			k := inode{uint64(st.Dev), st.Ino}
			if first, ok := links[k]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[k] = h.Name
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n++
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, tw.Close()
}

func lgetxattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// cmdImage assembles layers and a config into an image archive.
func cmdImage(args []string) error {
	fl := flag.NewFlagSet("image", flag.ExitOnError)
	out := fl.String("out", "", "image archive to write (.tar)")
	tag := fl.String("tag", "airlock:dev", "the image's name and tag")
	epoch := fl.Int64("epoch", 0, "the image's creation time (SOURCE_DATE_EPOCH)")
	entry := fl.String("entrypoint", "", "entrypoint, a JSON array")
	cmdJSON := fl.String("cmd", "", "default arguments, a JSON array")
	workdir := fl.String("workdir", "/", "working directory")
	var env, labels, ports, history multi
	fl.Var(&env, "env", "K=V (repeatable)")
	fl.Var(&labels, "label", "K=V (repeatable)")
	fl.Var(&ports, "port", "exposed port such as 8080/tcp (repeatable)")
	fl.Var(&history, "history", "what made each layer, in order (repeatable)")
	fl.Parse(args)
	if *out == "" || fl.NArg() == 0 {
		return errors.New("image: -out and at least one layer are required")
	}
	created := v1.Time{Time: time.Unix(*epoch, 0).UTC()}
	cfg := v1.Config{Env: env, WorkingDir: *workdir, Labels: map[string]string{}}
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("image: label %q is not K=V", kv)
		}
		cfg.Labels[k] = v
	}
	if len(ports) > 0 {
		cfg.ExposedPorts = map[string]struct{}{}
		for _, p := range ports {
			cfg.ExposedPorts[p] = struct{}{}
		}
	}
	for s, dst := range map[string]*[]string{*entry: &cfg.Entrypoint, *cmdJSON: &cfg.Cmd} {
		if s != "" {
			if err := json.Unmarshal([]byte(s), dst); err != nil {
				return fmt.Errorf("image: %q is not a JSON array of strings: %w", s, err)
			}
		}
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, p := range fl.Args() {
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("image: layer %s: %w", p, err)
		}
		h := v1.History{Created: created}
		if i < len(history) {
			h.CreatedBy = history[i]
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: h}); err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created, cf.Config = runtime.GOARCH, "linux", created, cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	dir, err := os.MkdirTemp(filepath.Dir(*out), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	ref := *tag
	if !strings.Contains(path.Base(ref), ":") {
		ref += ":latest"
	}
	// containerd and podman read the name from this annotation.
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	})); err != nil {
		return err
	}
	// Docker's manifest.json, so that older `docker load` takes it too.
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	dm := []map[string]any{{
		"Config":   "blobs/" + m.Config.Digest.Algorithm + "/" + m.Config.Digest.Hex,
		"RepoTags": []string{ref},
		"Layers":   layerPaths(m),
	}}
	b, _ := json.Marshal(dm)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if _, err := writeTree(f, dir, created.Time); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	digest, _ := img.Digest()
	var compressed, uncompressed int64
	for _, l := range m.Layers {
		compressed += l.Size
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return err
		}
		uncompressed += n
	}
	st, _ := os.Stat(*out)
	fmt.Printf("image %s %s: %d layers, %s compressed (archive %s), %s uncompressed, digest %s\n",
		*out, ref, len(m.Layers), mib(compressed), mib(st.Size()), mib(uncompressed), digest)
	return nil
}

func layerPaths(m *v1.Manifest) []string {
	var ps []string
	for _, l := range m.Layers {
		ps = append(ps, "blobs/"+l.Digest.Algorithm+"/"+l.Digest.Hex)
	}
	return ps
}

// cmdUnpack checks an image archive's digests and writes its flattened file
// system into DIR (which must be empty or absent).
func cmdUnpack(args []string) error {
	fl := flag.NewFlagSet("unpack", flag.ExitOnError)
	image := fl.String("image", "", "image archive (.tar) written by ociimage image")
	dir := fl.String("dir", "", "directory to unpack into")
	fl.Parse(args)
	if *image == "" || *dir == "" || fl.NArg() != 0 {
		return errors.New("unpack: -image and -dir are required")
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(*dir)), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	f, err := os.Open(*image)
	if err != nil {
		return err
	}
	err = untar(f, tmp, false)
	f.Close()
	if err != nil {
		return fmt.Errorf("unpack: reading the archive: %w", err)
	}
	idx, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) != 1 {
		return fmt.Errorf("unpack: the archive holds %d images, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return err
	}
	// Every blob is checked against its digest as it is read.
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		if err := verifyLayer(l); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if ents, _ := os.ReadDir(*dir); len(ents) > 0 {
		return fmt.Errorf("unpack: %s is not empty", *dir)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if err := untar(rc, *dir, true); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	fmt.Printf("unpacked %s into %s\n", *image, *dir)
	return nil
}

// verifyLayer checks a layer's blob against its digest; what it
// decompresses to is covered by gzip's own checksum as it is extracted.
func verifyLayer(l v1.Layer) error {
	want, err := l.Digest()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	h, _, err := v1.SHA256(rc)
	rc.Close()
	if err != nil {
		return err
	}
	if h != want {
		return fmt.Errorf("unpack: layer %s has digest %s", want, h)
	}
	return nil
}

// untar writes a tar stream beneath dir. Names that leave dir and paths
// through a symbolic link are refused; owners, modes, device numbers and
// times are restored when owners is set (as root).
func untar(r io.Reader, dir string, owners bool) error {
	tr := tar.NewReader(r)
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)
		if name == "/" {
			continue
		}
		for _, part := range strings.Split(h.Name, "/") {
			if part == ".." {
				return fmt.Errorf("%q: refusing a name with ..", h.Name)
			}
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := noLinkIn(dir, filepath.Dir(p)); err != nil {
			return fmt.Errorf("%q: %w", h.Name, err)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case tar.TypeReg:
			os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			target := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Linkname)))
			if err := noLinkIn(dir, filepath.Dir(target)); err != nil {
				return fmt.Errorf("%q: link target: %w", h.Name, err)
			}
			os.Remove(p)
			if err := os.Link(target, p); err != nil {
				return err
			}
			continue // the target's metadata is the link's
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if !owners {
				continue
			}
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[h.Typeflag]
			os.Remove(p)
			if err := unix.Mknod(p, kind|uint32(mode), int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))); err != nil {
				return err
			}
		default:
			continue
		}
		if owners {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
			for k, v := range h.PAXRecords {
				if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && h.Typeflag != tar.TypeSymlink {
					if err := unix.Lsetxattr(p, x, []byte(v), 0); err != nil {
						return fmt.Errorf("%s: xattr %s: %w", p, x, err)
					}
				}
			}
		}
		if h.Typeflag != tar.TypeSymlink {
			// After chown, which clears set-id bits.
			if err := os.Chmod(p, mode|setBits(h.Mode)); err != nil {
				return err
			}
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{p, h.ModTime})
			continue
		}
		ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	// Directory times last: creating their entries changed them.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i].p) > len(dirs[j].p) })
	for _, d := range dirs {
		os.Chtimes(d.p, d.t, d.t)
	}
	return nil
}

func setBits(m int64) fs.FileMode {
	var b fs.FileMode
	if m&04000 != 0 {
		b |= fs.ModeSetuid
	}
	if m&02000 != 0 {
		b |= fs.ModeSetgid
	}
	if m&01000 != 0 {
		b |= fs.ModeSticky
	}
	return b
}

// noLinkIn fails when a directory between root and p (p included) is a
// symbolic link or missing, so that no entry is written outside root.
func noLinkIn(root, p string) error {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s is outside %s", p, root)
	}
	if rel == "." {
		return nil
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("parent directory: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory (a symbolic link?)", cur)
		}
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
