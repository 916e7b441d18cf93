// Package notebooktest owns checking notebooks with the nbformat package
// (Debian's python3-nbformat, scripts/install-deps.sh --tests): what
// Jupyter itself says of a file airlock exports.
//
// It must never be imported by anything but tests.
package notebooktest

import (
	"bytes"
	"os/exec"
	"testing"

	"airlock/internal/testenv"
)

// python is Debian's, whose python3-nbformat the tests install.
const python = "/usr/bin/python3"

// Validate fails t unless nbformat accepts every notebook and reads each
// back with its cells (without nbformat it skips, or fails in a strict
// run).
func Validate(t testing.TB, nbs ...[]byte) {
	t.Helper()
	if err := exec.Command(python, "-c", "import nbformat").Run(); err != nil {
		testenv.Skip(t, "no nbformat for %s (apt-get install python3-nbformat; scripts/install-deps.sh --tests)", python)
		return
	}
	cmd := exec.Command(python, "-c", `
import json, sys, nbformat
for nb in json.load(sys.stdin):
    nbformat.validate(nb)
    back = nbformat.reads(json.dumps(nb), as_version=4)
    assert len(back.cells) == len(nb["cells"]), "cells lost"
`)
	cmd.Stdin = bytes.NewReader(append(append([]byte("["), bytes.Join(nbs, []byte(","))...), ']'))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbformat refuses the notebook: %v\n%s", err, out)
	}
}
