package runtimes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/testenv"
)

// The Python runtime's bytecode, compiled into a root by Precompile, is
// what the interpreter loads: the images are unchecked (PEP 552), so a
// module whose source was broken after compiling still imports, which it
// could only do from its image.
func TestPrecompiledRuntimeIsLoaded(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Skip(t, "%s is not available: %v", python, err)
	}
	key, prepare := Precompile(python)
	if key == "" || prepare == nil {
		t.Fatalf("Precompile(%s): key %q, prepare %v", python, key, prepare != nil)
	}
	if k2, _ := Precompile(python); k2 != key {
		t.Errorf("the key changes between calls: %q, %q", key, k2)
	}
	root := t.TempDir()
	for p, text := range RootFiles() {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := prepare(root); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, RuntimeDir, "python", "airlock_runtime")
	for _, mod := range []string{"wire", "session", "program", "current"} {
		if m, _ := filepath.Glob(filepath.Join(pkg, "__pycache__", mod+".*.pyc")); len(m) != 1 {
			t.Errorf("%s: images %q, want one", mod, m)
		}
	}
	if err := os.WriteFile(filepath.Join(pkg, "wire.py"), []byte("raise SystemExit('compiled from source')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-I", "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import airlock_runtime.wire; print('loaded')", filepath.Dir(pkg)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "loaded" {
		t.Fatalf("importing the precompiled wire: %v: %s", err, out)
	}
	// Without an interpreter there is nothing to compile, and no key.
	if key, prepare := Precompile(filepath.Join(root, "no-python")); key != "" || prepare != nil {
		t.Errorf("a missing interpreter: key %q", key)
	}
}
