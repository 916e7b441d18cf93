package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
)

// source is an image opened for import.
type source struct {
	img v1.Image
	// kind says what it was: "oci-layout", "oci-archive", "docker-archive".
	kind string
	// manifestDigest is the digest the layout's index gave the manifest
	// (checked against its bytes); empty for a docker archive.
	manifestDigest v1.Hash
	// uncompressed: read layers with Uncompressed (a docker archive's
	// layers are tars; its Compressed would gzip them on the fly).
	uncompressed bool
	cleanup      func()
	// read counts the bytes of its layers read so far, as stored.
	read atomic.Int64
}

// readCounter counts what is read through it into n.
type readCounter struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c readCounter) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// openOCI opens the image at src: an OCI layout directory, or a tar file
// written by `docker save`, `podman save` (either format) or any tool that
// writes an OCI archive. ref picks one image when src holds several (a
// tag such as "name:tag", or for a layout its ref.name annotation).
func openOCI(src, ref, tmp string) (*source, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return openLayout(src, ref, "oci-layout")
	}
	// A tar: docker-archive when it has manifest.json, else an OCI
	// archive (index.json, blobs/), unpacked to a layout first.
	has, err := tarHas(src, "manifest.json", "index.json")
	if err != nil {
		return nil, bad("%s is neither a directory nor a tar archive: %v", filepath.Base(src), err)
	}
	switch {
	case has["manifest.json"]:
		var tag *name.Tag
		if ref != "" {
			t, err := name.NewTag(ref)
			if err != nil {
				return nil, bad("image reference %q: %v", ref, err)
			}
			tag = &t
		}
		img, err := tarball.ImageFromPath(src, tag)
		if err != nil {
			return nil, bad("%v", err)
		}
		return &source{img: img, kind: "docker-archive", uncompressed: true, cleanup: func() {}}, nil
	case has["index.json"]:
		dir, err := os.MkdirTemp(tmp, ".oci-")
		if err != nil {
			return nil, err
		}
		if err := unpackLayout(src, dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s, err := openLayout(dir, ref, "oci-archive")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.cleanup = func() { os.RemoveAll(dir) }
		return s, nil
	}
	return nil, bad("%s has neither manifest.json (docker save) nor index.json (an OCI archive)", filepath.Base(src))
}

// tarHas reports which of names are entries of the tar at p.
func tarHas(p string, names ...string) (map[string]bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		n := path.Clean(h.Name)
		for _, want := range names {
			if n == want {
				out[want] = true
			}
		}
	}
}

// unpackLayout writes the index and blobs of an OCI archive into dir:
// only regular files named index.json, oci-layout and
// blobs/<algorithm>/<hex>, so that nothing else of the archive lands.
func unpackLayout(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bad("reading the archive: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		n := path.Clean(h.Name)
		parts := strings.Split(n, "/")
		ok := n == "index.json" || n == "oci-layout" ||
			len(parts) == 3 && parts[0] == "blobs" && validHex(parts[1], parts[2])
		if !ok {
			continue
		}
		if len(parts) == 3 {
			if err := r.MkdirAll(path.Dir(n), 0o700); err != nil {
				return err
			}
		}
		out, err := r.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

func validHex(algo, h string) bool {
	if algo != "sha256" && algo != "sha512" || len(h) < 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// openLayout opens the one image of the layout at dir (or the one whose
// ref.name annotation is ref), its manifest checked against the digest
// the index gives it.
func openLayout(dir, ref, kind string) (*source, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, bad("%s is not an OCI layout: %v", filepath.Base(dir), err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, bad("the layout's index: %v", err)
	}
	var picked []v1.Descriptor
	var names []string
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		rn := d.Annotations["org.opencontainers.image.ref.name"]
		names = append(names, rn)
		if ref == "" || rn == ref || strings.HasSuffix(rn, ":"+ref) {
			picked = append(picked, d)
		}
	}
	switch {
	case len(picked) == 0 && ref != "":
		return nil, bad("the layout has no image named %q (it has %q)", ref, names)
	case len(picked) == 0:
		return nil, bad("the layout has no image (an index of indexes or of other platforms is not read: export one image)")
	case len(picked) > 1:
		return nil, bad("the layout has %d images: name one (%q)", len(picked), names)
	}
	d := picked[0]
	if d.Size > 16<<20 {
		return nil, bad("the manifest declares %d bytes", d.Size)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, bad("%v", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, bad("the manifest: %v", err)
	}
	if got := sha256.Sum256(raw); d.Digest.Algorithm != "sha256" || hex.EncodeToString(got[:]) != d.Digest.Hex {
		return nil, bad("the manifest does not match its digest %s", d.Digest)
	}
	return &source{img: img, kind: kind, manifestDigest: d.Digest, cleanup: func() {}}, nil
}

// imageInfo is what an import records of an OCI image.
type imageInfo struct {
	Digest string // the manifest's (layouts) or the config's (docker archives)
	Config v1.ConfigFile
	Layers []v1.Hash // diff ids
	Size   int64     // declared compressed size of the layers
}

// check verifies the image's config against its digest and the limits
// against what the manifest declares, before anything is read.
func (s *source) check(l Limits) (imageInfo, error) {
	var info imageInfo
	m, err := s.img.Manifest()
	if err != nil {
		return info, bad("the manifest: %v", err)
	}
	raw, err := s.img.RawConfigFile()
	if err != nil {
		return info, bad("the image's config: %v", err)
	}
	sum := sha256.Sum256(raw)
	if !s.uncompressed && (m.Config.Digest.Algorithm != "sha256" || m.Config.Digest.Hex != hex.EncodeToString(sum[:])) {
		return info, bad("the image's config does not match its digest %s", m.Config.Digest)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return info, bad("the image's config: %v", err)
	}
	info.Config = *cfg
	info.Digest = s.manifestDigest.String()
	if s.uncompressed {
		info.Digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	if len(m.Layers) > l.Layers {
		return info, bad("the image has %d layers, more than %d", len(m.Layers), l.Layers)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return info, bad("the image's config lists %d layers, its manifest %d", len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return info, bad("the image is for %s, not linux", cfg.OS)
	}
	for i, d := range m.Layers {
		if d.Size < 0 || d.Size > l.Layer {
			return info, bad("layer %d declares %d bytes, more than the %d a layer may have", i+1, d.Size, l.Layer)
		}
		info.Size += d.Size
	}
	info.Layers = cfg.RootFS.DiffIDs
	return info, nil
}

// unpack writes the image's layers, in order, into dir. Every layer is
// checked against its digest (compressed, as the manifest names it) and
// its diff id (uncompressed, as the config names it) while it is read: a
// layer that does not match fails the import.
func (s *source) unpack(ctx context.Context, a *applier, info imageInfo, progress func(Event)) error {
	layers, err := s.img.Layers()
	if err != nil {
		return bad("%v", err)
	}
	for i, layer := range layers {
		ev := func(bytes int64) Event {
			return Event{Stage: "layer", Layer: i + 1, Layers: len(layers), Bytes: bytes, Read: s.read.Load(), Total: info.Size}
		}
		a.onBytes = throttle(func(n int64) { progress(ev(n)) })
		progress(ev(a.bytes))
		if err := s.layer(ctx, a, layer, info.Layers[i], i+1); err != nil {
			return err
		}
	}
	return nil
}

func (s *source) layer(ctx context.Context, a *applier, layer v1.Layer, diffID v1.Hash, n int) error {
	var r io.Reader
	var rc io.ReadCloser
	var err error
	var digest hash.Hash
	var want v1.Hash
	var declared int64
	var counted *limitReader
	if s.uncompressed {
		if rc, err = layer.Uncompressed(); err != nil {
			return bad("layer %d: %v", n, err)
		}
		rc = readCounter{rc, &s.read}
		r = rc
	} else {
		if want, err = layer.Digest(); err != nil {
			return bad("layer %d: %v", n, err)
		}
		if declared, err = layer.Size(); err != nil {
			return bad("layer %d: %v", n, err)
		}
		if rc, err = layer.Compressed(); err != nil {
			return bad("layer %d: %v", n, err)
		}
		rc = readCounter{rc, &s.read}
		if want.Algorithm != "sha256" {
			rc.Close()
			return bad("layer %d: digest algorithm %q", n, want.Algorithm)
		}
		digest = sha256.New()
		counted = &limitReader{r: rc, n: declared}
		if r, err = decompress(io.TeeReader(counted, digest)); err != nil {
			rc.Close()
			return bad("layer %d: %v", n, err)
		}
	}
	defer rc.Close()
	if diffID.Algorithm != "sha256" {
		return bad("layer %d: diff id algorithm %q", n, diffID.Algorithm)
	}
	diff := sha256.New()
	if err := a.apply(ctx, io.TeeReader(r, diff)); err != nil {
		if errors.Is(err, ErrBadImage) || ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("layer %d: %w", n, err)
	}
	// Whatever the tar left unread (padding) counts in both digests.
	if _, err := io.Copy(diff, &countReader{r: r, a: a}); err != nil {
		return bad("layer %d: %v", n, err)
	}
	if hex.EncodeToString(diff.Sum(nil)) != diffID.Hex {
		return bad("layer %d does not match its diff id %s", n, diffID)
	}
	if digest != nil {
		if _, err := io.Copy(digest, counted); err != nil {
			return bad("layer %d: %v", n, err)
		}
		if counted.read != declared {
			return bad("layer %d is %d bytes, its manifest says %d", n, counted.read, declared)
		}
		if hex.EncodeToString(digest.Sum(nil)) != want.Hex {
			return bad("layer %d does not match its digest %s", n, want)
		}
	}
	return nil
}

// limitReader fails when more than n bytes come: a layer larger than
// its manifest says.
type limitReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.read += int64(n); l.read > l.n {
		return n, bad("a layer is larger than its manifest declares (%d bytes)", l.n)
	}
	return n, err
}

// decompress reads a layer blob: gzip, zstd or a plain tar, told by its
// first bytes (what the media type claims is not trusted).
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		zr.Multistream(true)
		return zr, nil
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// The window is capped so that a frame cannot make the decoder
		// allocate without bound.
		zr, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(64<<20), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return br, nil
}
