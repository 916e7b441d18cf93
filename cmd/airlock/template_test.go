package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"airlock/internal/errdefs"
	"airlock/internal/image/imagetest"
	"airlock/internal/testenv"
)

// ociLayout writes an OCI layout of one image whose layers are the given
// tar entries (name -> content; a name ending in "/" is a directory).
func ociLayout(t *testing.T, layers ...map[string]string) string {
	t.Helper()
	img := empty.Image
	for _, files := range layers {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for name, body := range files {
			h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}
			if strings.HasSuffix(name, "/") {
				h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
			}
			tw.WriteHeader(h)
			tw.Write([]byte(body))
		}
		tw.Close()
		layer, err := tarball.LayerFromReader(bytes.NewReader(b.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `airlock template import|list|rm` on a store of the test's own: JSON
// events with the template last, a bad image refused with a clear error
// and nothing left, a removal.
func TestTemplateCommand(t *testing.T) {
	testenv.RequireRoot(t, "the template store is root's")
	store := filepath.Join(t.TempDir(), "templates")
	withEnv(t, "AIRLOCK_TEMPLATES_DIR="+store, "AIRLOCK_STATE_DIR=/run/airlock-cli-template-test")
	src := ociLayout(t, map[string]string{"usr/": "", "usr/bin/": "", "usr/share/hello": "hi\n", "old": "x"}, map[string]string{".wh.old": ""})
	var out, errb bytes.Buffer
	if code := templateCmd([]string{"import", "--json", "small", src}, &out, &errb); code != 0 {
		t.Fatalf("import: %d %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last struct {
		Stage    string
		Template struct{ Name, Version, Source string }
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Stage != "template" || last.Template.Name != "small" || last.Template.Source != "oci-layout" || !strings.Contains(out.String(), `"stage":"layer"`) {
		t.Fatalf("events:\n%s", out.String())
	}
	out.Reset()
	if code := templateCmd([]string{"list", "--json"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"name":"small"`) {
		t.Fatalf("list: %d %s", code, out.String())
	}
	// A layer that climbs out of the root: refused, and nothing stays.
	bad := ociLayout(t, map[string]string{"../../etc/evil": "x"})
	out.Reset()
	errb.Reset()
	code := templateCmd([]string{"import", "evil", bad}, &out, &errb)
	if code != errdefs.ExitCode(errdefs.ErrInvalidArgument) || !strings.Contains(errb.String(), "leaves the root") {
		t.Fatalf("bad image: %d %q", code, errb.String())
	}
	ents, _ := os.ReadDir(store)
	for _, e := range ents {
		if e.Name() != ".lock" && e.Name() != "small" {
			t.Errorf("left in the store: %s", e.Name())
		}
	}
	out.Reset()
	if code := templateCmd([]string{"rm", "small"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "removed small") {
		t.Fatalf("rm: %d %s %s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(store, "small")); !os.IsNotExist(err) {
		t.Errorf("small is still there: %v", err)
	}
	if code := templateCmd([]string{"build", "x"}, &out, &errb); code != exitUsage {
		t.Errorf("build without packages: %d", code)
	}
}

// `airlock run --template` builds its jail on the template's root: the
// python recipe has no numpy, which the host may have.
func TestRunOnTemplate(t *testing.T) {
	store := imagetest.Store(t, "python")
	withEnv(t, "AIRLOCK_TEMPLATES_DIR="+store.Dir(), "AIRLOCK_STATE_DIR=/run/airlock-cli-template-test", "AIRLOCK_SERVER_SOCKET=off")
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("import importlib.util, sys\nprint('numpy' if importlib.util.find_spec('numpy') else 'no numpy', sys.version_info[0])\n"), 0o644)
	var out, errb bytes.Buffer
	if code := runCmd([]string{"--template", "python", prog}, strings.NewReader(""), &out, &errb); code != 0 || out.String() != "no numpy 3\n" {
		t.Fatalf("run: %d %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runCmd([]string{"--template", "nonexistent", prog}, strings.NewReader(""), &out, &errb); code == 0 || !strings.Contains(errb.String(), "no such template") {
		t.Fatalf("unknown template: %d %q", code, errb.String())
	}
}
