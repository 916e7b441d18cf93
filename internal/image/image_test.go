package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one tar entry of a crafted layer.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func file(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, link: to, typ: tar.TypeLink, mode: 0o644}
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// applyLayers applies layers to a fresh root inside a parent directory
// that also holds a sentinel file, and checks nothing outside the root
// changed.
func applyLayers(t *testing.T, l Limits, layers ...[]byte) (string, *applier, error) {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	os.Mkdir(root, 0o755)
	os.WriteFile(filepath.Join(parent, "sentinel"), []byte("host"), 0o644)
	a, err := newApplier(root, l)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	for _, layer := range layers {
		if err = a.apply(context.Background(), bytes.NewReader(layer)); err != nil {
			break
		}
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 2 {
		t.Fatalf("something was written beside the root: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "sentinel")); string(b) != "host" {
		t.Fatal("the sentinel outside the root changed")
	}
	return root, a, err
}

func TestApplyRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]byte
		want   string
	}{
		{"absolute path", [][]byte{layerTar(t, file("/etc/passwd", "x"))}, "absolute path"},
		{"dot-dot", [][]byte{layerTar(t, file("../sentinel", "x"))}, "leaves the root"},
		{"inner dot-dot", [][]byte{layerTar(t, file("a/../../sentinel", "x"))}, "leaves the root"},
		{"symlink out", [][]byte{layerTar(t, symlink("a/up", "../../sentinel"))}, "points outside"},
		{"symlink out from the top", [][]byte{layerTar(t, symlink("up", "../x"))}, "points outside"},
		{"write through a symlink", [][]byte{layerTar(t, symlink("lib", "usr/lib"), file("lib/x.so", "x"))}, "under the symlink"},
		{"write through a symlink, next layer", [][]byte{layerTar(t, symlink("out", "/")), layerTar(t, file("out/sentinel", "x"))}, "under the symlink"},
		{"hard link out", [][]byte{layerTar(t, hardlink("a", "../sentinel"))}, "leaves the root"},
		{"hard link to nothing", [][]byte{layerTar(t, hardlink("a", "nothing"))}, "not a file the image wrote"},
		{"hard link to a symlink", [][]byte{layerTar(t, symlink("l", "/etc/shadow"), hardlink("a", "l"))}, "not a file the image wrote"},
		{"hard link through a symlink", [][]byte{layerTar(t, symlink("d", "/etc"), hardlink("a", "d/shadow"))}, "symlink"},
		{"whiteout through a symlink", [][]byte{layerTar(t, symlink("d", "/")), layerTar(t, file("d/.wh.etc", ""))}, "symlink"},
		{"root replaced", [][]byte{layerTar(t, file(".", "x"))}, "replaces the image's root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := applyLayers(t, DefaultLimits(), tc.layers...)
			if err == nil {
				t.Fatal("applied")
			}
			if tc.want != "" && !errors.Is(err, ErrBadImage) {
				t.Fatalf("not a bad image: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestApplyStripsPrivilege(t *testing.T) {
	root, a, err := applyLayers(t, DefaultLimits(), layerTar(t,
		dir("usr/bin"),
		entry{name: "usr/bin/su", body: "x", typ: tar.TypeReg, mode: 0o4755},
		entry{name: "usr/bin/wall", body: "x", typ: tar.TypeReg, mode: 0o2755},
		entry{name: "tmp", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666},
		entry{name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
		entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o666},
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/bin/su", "usr/bin/wall"} {
		st, err := os.Lstat(filepath.Join(root, p))
		if err != nil || st.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || st.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v %v", p, st.Mode(), err)
		}
	}
	if st, _ := os.Lstat(filepath.Join(root, "tmp")); st.Mode()&fs.ModeSticky == 0 {
		t.Fatal("the sticky bit of tmp was lost")
	}
	for _, p := range []string{"dev/sda", "dev/mem", "run/fifo"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Fatalf("%s was created", p)
		}
	}
	if a.strip != (Stripped{Devices: 2, Fifos: 1, SetID: 2}) {
		t.Fatalf("stripped %+v", a.strip)
	}
}

func TestApplyWhiteoutsAndLinks(t *testing.T) {
	root, a, err := applyLayers(t, DefaultLimits(),
		layerTar(t, file("a/b", "b"), file("a/c", "c"), file("d", "d"), file("x/old", "old"), file("x/sub/deep", "deep"),
			symlink("bin", "usr/bin"), file("usr/bin/sh", "sh"), hardlink("usr/bin/bash", "usr/bin/sh")),
		layerTar(t, file("a/.wh.b", ""), file(".wh.d", ""), file("x/new", "new"), file("x/.wh..wh..opq", ""), file("a/.wh.missing", "")),
	)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel)
		return nil
	})
	sort.Strings(got)
	want := []string{".", "a", "a/c", "bin", "usr", "usr/bin", "usr/bin/bash", "usr/bin/sh", "x", "x/new"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v, want %v", got, want)
	}
	s1, _ := os.Stat(filepath.Join(root, "usr/bin/sh"))
	s2, _ := os.Stat(filepath.Join(root, "usr/bin/bash"))
	if !os.SameFile(s1, s2) {
		t.Fatal("the hard link is a copy")
	}
	if a.strip.Whiteout != 4 {
		t.Fatalf("whiteouts %d", a.strip.Whiteout)
	}
}

func TestApplyCaps(t *testing.T) {
	// A decompression bomb: a small gzip stream of a large file.
	big := layerTar(t, file("zeros", strings.Repeat("\x00", 8<<20)))
	zr, _ := gzip.NewReader(bytes.NewReader(gz(big)))
	l := DefaultLimits()
	l.Bytes = 1 << 20
	_, _, err := applyLayers(t, l, mustRead(t, zr))
	if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("bomb: %v", err)
	}
	l = DefaultLimits()
	l.Files = 3
	_, _, err = applyLayers(t, l, layerTar(t, file("a", ""), file("b", ""), file("c", ""), file("d", "")))
	if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), "more than 3 files") {
		t.Fatalf("files: %v", err)
	}
}

func mustRead(t *testing.T, r io.Reader) []byte {
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeLayout writes an OCI layout of one image with layers (gzipped),
// letting edit change the manifest before it is written.
func writeLayout(t *testing.T, layers [][]byte, edit func(m *v1.Manifest, blobs map[string][]byte)) string {
	t.Helper()
	dir := t.TempDir()
	blobs := map[string][]byte{}
	put := func(b []byte) v1.Hash {
		sum := sha256.Sum256(b)
		h := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
		blobs[h.Hex] = b
		return h
	}
	cfg := v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, RootFS: v1.RootFS{Type: "layers"}, Config: v1.Config{Env: []string{"PATH=/usr/bin"}}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, l := range layers {
		sum := sha256.Sum256(l)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])})
		z := gz(l)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: int64(len(z)), Digest: put(z)})
	}
	cb, _ := json.Marshal(cfg)
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cb)), Digest: put(cb)}
	if edit != nil {
		edit(&m, blobs)
	}
	mb, _ := json.Marshal(m)
	md := put(mb)
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(mb)), Digest: md,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": "test:1"},
	}}}
	ib, _ := json.Marshal(idx)
	os.WriteFile(filepath.Join(dir, "index.json"), ib, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "blobs/sha256"), 0o755)
	for h, b := range blobs {
		os.WriteFile(filepath.Join(dir, "blobs/sha256", h), b, 0o644)
	}
	return dir
}

func smallImage(t *testing.T) [][]byte {
	return [][]byte{
		layerTar(t, dir("usr/bin"), entry{name: "usr/bin/bash", body: "#!bash", typ: tar.TypeReg, mode: 0o755},
			symlink("bin", "usr/bin"), file("etc/os-release", "ID=test\n"), file("old", "old")),
		layerTar(t, file(".wh.old", ""), file("usr/share/hello.txt", "hello from layer 2\n"),
			symlink("usr/bin/python3", "python3.11"), entry{name: "usr/bin/python3.11", body: "py", typ: tar.TypeReg, mode: 0o755}),
	}
}

func openStore(t *testing.T) *Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "templates")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// leftovers lists what an import left in the store besides templates.
func leftovers(t *testing.T, s *Store) []string {
	var out []string
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if e.Name() != ".lock" {
			out = append(out, e.Name())
		}
	}
	return out
}

func checkSmall(t *testing.T, tm Template) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tm.Root, "usr/share/hello.txt"))
	if err != nil || string(b) != "hello from layer 2\n" {
		t.Fatalf("hello.txt: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(tm.Root, "old")); err == nil {
		t.Fatal("the whiteout did not remove old")
	}
	if tm.Runtimes["bash"] != "/usr/bin/bash" || tm.Runtimes["python"] != "/usr/bin/python3" || tm.Runtimes["javascript"] != "" {
		t.Fatalf("runtimes %v", tm.Runtimes)
	}
	if tm.Files < 8 || tm.Size <= 0 {
		t.Fatalf("size %d files %d", tm.Size, tm.Files)
	}
}

func TestImportOCILayout(t *testing.T) {
	s := openStore(t)
	var events []Event
	tm, err := s.Import(context.Background(), "small", writeLayout(t, smallImage(t), nil), ImportOptions{Progress: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	checkSmall(t, tm)
	if tm.Source != "oci-layout" || !strings.HasPrefix(tm.Digest, "sha256:") || len(tm.Env) != 1 {
		t.Fatalf("meta %+v", tm)
	}
	if len(events) < 3 || events[len(events)-1].Stage != "done" {
		t.Fatalf("events %+v", events)
	}
	// Layer events carry the image's progress: what was read of its
	// declared size, growing, the second layer's start past the first.
	var layerEvents []Event
	for _, e := range events {
		if e.Stage == "layer" {
			layerEvents = append(layerEvents, e)
		}
	}
	if len(layerEvents) != 2 || layerEvents[0].Total == 0 || layerEvents[0].Read != 0 ||
		layerEvents[1].Read <= 0 || layerEvents[1].Read >= layerEvents[1].Total || layerEvents[1].Total != layerEvents[0].Total {
		t.Fatalf("layer events %+v", layerEvents)
	}
	got, err := s.Get("small")
	if err != nil || got.Version != tm.Version || got.Root != tm.Root {
		t.Fatalf("get %+v %v", got, err)
	}
	if l := leftovers(t, s); len(l) != 1 || l[0] != "small" {
		t.Fatalf("leftovers %v", l)
	}
}

func TestImportArchives(t *testing.T) {
	s := openStore(t)
	// docker save's format, written by go-containerregistry.
	img := empty.Image
	for _, l := range smallImage(t) {
		layer, err := tarball.LayerFromReader(bytes.NewReader(l))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	tag, _ := name.NewTag("example.com/small:1")
	docker := filepath.Join(t.TempDir(), "docker.tar")
	if err := tarball.WriteToFile(docker, tag, img); err != nil {
		t.Fatal(err)
	}
	tm, err := s.Import(context.Background(), "docker", docker, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSmall(t, tm)
	if tm.Source != "docker-archive" {
		t.Fatalf("source %q", tm.Source)
	}
	// An OCI archive: the layout, tarred (podman save --format oci-archive).
	layoutDir := writeLayout(t, smallImage(t), nil)
	archive := filepath.Join(t.TempDir(), "oci.tar")
	tarDir(t, layoutDir, archive)
	tm, err = s.Import(context.Background(), "oci", archive, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkSmall(t, tm)
	if tm.Source != "oci-archive" {
		t.Fatalf("source %q", tm.Source)
	}
	if l := leftovers(t, s); strings.Join(l, " ") != "docker oci" {
		t.Fatalf("leftovers %v", l)
	}
}

func tarDir(t *testing.T, dir, out string) {
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeDirTar(context.Background(), f, dir); err != nil {
		t.Fatal(err)
	}
}

func TestImportDirectory(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(src, "usr/bin/bash"), []byte("x"), 0o755)
	os.Chmod(filepath.Join(src, "usr/bin/bash"), 0o755|fs.ModeSetuid)
	os.Link(filepath.Join(src, "usr/bin/bash"), filepath.Join(src, "usr/bin/sh"))
	os.Symlink("usr/bin", filepath.Join(src, "bin"))
	os.Symlink("/etc/shadow", filepath.Join(src, "shadow")) // read inside the sandbox, never here
	s := openStore(t)
	tm, err := s.Import(context.Background(), "dir", src, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(tm.Root, "usr/bin/bash"))
	if err != nil || st.Mode()&fs.ModeSetuid != 0 {
		t.Fatalf("bash %v %v", st.Mode(), err)
	}
	s2, _ := os.Lstat(filepath.Join(tm.Root, "usr/bin/sh"))
	if !os.SameFile(st, s2) || tm.Stripped.SetID != 1 || tm.Source != "dir" || tm.Runtimes["bash"] == "" {
		t.Fatalf("%+v", tm)
	}
	if target, _ := os.Readlink(filepath.Join(tm.Root, "shadow")); target != "/etc/shadow" {
		t.Fatalf("shadow -> %q", target)
	}
	// A relative link out of the directory is refused, and nothing stays.
	os.Symlink("../../../etc/shadow", filepath.Join(src, "usr/out"))
	if _, err := s.Import(context.Background(), "dir2", src, ImportOptions{}); !errors.Is(err, ErrBadImage) {
		t.Fatalf("escaping link: %v", err)
	}
	if l := leftovers(t, s); strings.Join(l, " ") != "dir" {
		t.Fatalf("leftovers %v", l)
	}
}

func TestImportRefusesBadImages(t *testing.T) {
	layers := smallImage(t)
	for _, tc := range []struct {
		name string
		edit func(m *v1.Manifest, blobs map[string][]byte)
		want string
	}{
		{"a 10 GB layer declared", func(m *v1.Manifest, _ map[string][]byte) { m.Layers[0].Size = 10 << 30 }, "declares 10737418240 bytes"},
		{"a layer that is not its digest", func(m *v1.Manifest, blobs map[string][]byte) {
			b := blobs[m.Layers[1].Digest.Hex]
			blobs[m.Layers[1].Digest.Hex] = gz(append(layers[1][:len(layers[1]):len(layers[1])], make([]byte, 512)...))
			_ = b
			m.Layers[1].Size = int64(len(blobs[m.Layers[1].Digest.Hex]))
		}, "does not match"},
		{"a layer longer than declared", func(m *v1.Manifest, _ map[string][]byte) { m.Layers[0].Size -= 10 }, "larger than its manifest"},
		{"a config that is not its digest", func(m *v1.Manifest, blobs map[string][]byte) {
			blobs[m.Config.Digest.Hex] = append(blobs[m.Config.Digest.Hex], ' ')
		}, "config does not match"},
		{"a traversal in a layer", func(m *v1.Manifest, blobs map[string][]byte) {
			evil := layerTar(t, file("../../../../tmp/evil", "x"))
			replaceLayer(m, blobs, 1, evil)
		}, "leaves the root"},
		{"a device node only", func(m *v1.Manifest, blobs map[string][]byte) {
			replaceLayer(m, blobs, 1, layerTar(t, entry{name: "dev/kmsg", typ: tar.TypeChar, mode: 0o666}, symlink("escape", "../../..")))
		}, "points outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			_, err := s.Import(context.Background(), "bad", writeLayout(t, layers, tc.edit), ImportOptions{})
			if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if l := leftovers(t, s); len(l) != 0 {
				t.Fatalf("leftovers %v", l)
			}
		})
	}
}

// replaceLayer makes layer i of m hold tarBytes, digests and diff id
// updated so that only its content is wrong.
func replaceLayer(m *v1.Manifest, blobs map[string][]byte, i int, tarBytes []byte) {
	z := gz(tarBytes)
	sum := sha256.Sum256(z)
	m.Layers[i] = v1.Descriptor{MediaType: types.OCILayer, Size: int64(len(z)), Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
	blobs[m.Layers[i].Digest.Hex] = z
	var cfg v1.ConfigFile
	json.Unmarshal(blobs[m.Config.Digest.Hex], &cfg)
	d := sha256.Sum256(tarBytes)
	cfg.RootFS.DiffIDs[i] = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(d[:])}
	cb, _ := json.Marshal(cfg)
	cs := sha256.Sum256(cb)
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cb)), Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(cs[:])}}
	blobs[m.Config.Digest.Hex] = cb
}

func TestImportInterrupted(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := s.Import(ctx, "cut", writeLayout(t, smallImage(t), nil), ImportOptions{Progress: func(e Event) {
		if e.Stage == "layer" {
			if n++; n == 2 {
				cancel() // as SIGINT does, between layers
			}
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if l := leftovers(t, s); len(l) != 0 {
		t.Fatalf("leftovers %v", l)
	}
}

func TestVersionsAndLeases(t *testing.T) {
	s := openStore(t)
	src := writeLayout(t, smallImage(t), nil)
	v1t, err := s.Import(context.Background(), "t", src, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := s.Acquire("t")
	if err != nil || lease.Version != v1t.Version {
		t.Fatalf("acquire %v", err)
	}
	lease2, _ := s.Acquire("t")
	v2t, err := s.Import(context.Background(), "t", src, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v2t.Version == v1t.Version {
		t.Fatal("same version twice")
	}
	// The running sandbox's version stays while it is held.
	if _, err := os.Stat(filepath.Join(lease.Root, "usr/share/hello.txt")); err != nil {
		t.Fatal("a held version was removed by an import")
	}
	if cur, _ := s.Get("t"); cur.Version != v2t.Version {
		t.Fatalf("current %s", cur.Version)
	}
	lease.Release()
	lease.Release() // twice is harmless; the second holder still has it
	if _, err := os.Stat(lease.Root); err != nil {
		t.Fatal("released while another lease holds it")
	}
	lease2.Release()
	if vs, _ := s.Versions("t"); len(vs) != 1 || vs[0] != v2t.Version {
		t.Fatalf("versions %v", vs)
	}
	// Removal: gone for new users at once, on disk until released.
	held, _ := s.Acquire("t")
	kept, err := s.Remove("t")
	if err != nil || len(kept) != 1 {
		t.Fatalf("remove: %v %v", kept, err)
	}
	if _, err := s.Acquire("t"); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("acquire after rm: %v", err)
	}
	if l, _ := s.List(); len(l) != 0 {
		t.Fatalf("list %v", l)
	}
	held.Release()
	if l := leftovers(t, s); len(l) != 0 {
		t.Fatalf("leftovers %v", l)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"code-interpreter", "a", "py3.12", "x_1"} {
		if CheckName(ok) != nil {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", ".x", "-x", "A", "a/b", "..", "a b", strings.Repeat("a", 64)} {
		if CheckName(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// sparseTar is a layer holding one PAX sparse file (GNU.sparse 1.0, as GNU
// tar --sparse writes it) of size bytes, all hole: a few KB of tar that
// archive/tar expands to size bytes of zeros. tar.Writer cannot write
// one, so the blocks are made here.
func sparseTar(name string, size int64) []byte {
	hdr := func(name string, typ byte, n int) []byte {
		b := make([]byte, 512)
		copy(b, name)
		copy(b[100:], "0000644\x00")
		copy(b[108:], "0000000\x00")
		copy(b[116:], "0000000\x00")
		copy(b[124:], fmt.Sprintf("%011o\x00", n))
		copy(b[136:], "00000000000\x00")
		b[156] = typ
		copy(b[257:], "ustar\x0000")
		copy(b[148:], "        ")
		sum := 0
		for _, c := range b {
			sum += int(c)
		}
		copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
		return b
	}
	rec := func(k, v string) string {
		s := " " + k + "=" + v + "\n"
		n := len(s)
		for len(strconv.Itoa(n))+len(s) != n {
			n = len(strconv.Itoa(n)) + len(s)
		}
		return strconv.Itoa(n) + s
	}
	pad := func(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", name) + rec("GNU.sparse.realsize", strconv.FormatInt(size, 10))
	data := pad([]byte(fmt.Sprintf("1\n%d\n0\n", size-1)))
	out := append(hdr("PaxHeaders/"+name, 'x', len(pax)), pad([]byte(pax))...)
	out = append(append(out, hdr("GNUSparseFile.0/"+name, '0', len(data))...), data...)
	return append(out, make([]byte, 1024)...)
}

// A sparse file's holes cost the stream nothing: its size counts against
// the cap all the same, before a byte of it is written.
func TestApplySparseBomb(t *testing.T) {
	l := DefaultLimits()
	l.Bytes = 1 << 20
	layer := sparseTar("zeros", 64<<20)
	if len(layer) > 4096 {
		t.Fatalf("the layer is %d bytes", len(layer))
	}
	root, _, err := applyLayers(t, l, layer)
	if !errors.Is(err, ErrBadImage) || !strings.Contains(err.Error(), `entry "zeros": the image's files are larger than 1048576 bytes`) {
		t.Fatalf("sparse bomb: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "zeros")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("zeros written: %v", err)
	}
	// Within the cap, it is a file like any other.
	root, _, err = applyLayers(t, DefaultLimits(), sparseTar("small", 4096))
	if st, serr := os.Stat(filepath.Join(root, "small")); err != nil || serr != nil || st.Size() != 4096 {
		t.Fatalf("small sparse file: %v %v", err, serr)
	}
}
