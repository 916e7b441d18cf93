package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestVersionOf: a runsc built from a gVisor module version (the pinned
// one, by the scripts) is named by that version, not by its
// "VERSION_MISSING" stamp; anything else is left to runsc --version.
func TestVersionOf(t *testing.T) {
	for _, c := range []struct {
		path, version, want string
	}{
		{gvisorModule, PinnedVersion, "runsc version gvisor.dev/gvisor@" + PinnedVersion},
		{gvisorModule, "(devel)", ""}, // built from a checkout
		{gvisorModule, "", ""},
		{"example.com/other", "v1.2.3", ""},
		{"", "", ""},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: c.path, Version: c.version}}
		if got := versionOf(bi); got != c.want {
			t.Errorf("versionOf(%s %s) = %q, want %q", c.path, c.version, got, c.want)
		}
	}
}

// TestVersionFallsBack: a runsc without Go build information (a release
// binary) is named by what runsc --version says.
func TestVersionFallsBack(t *testing.T) {
	runsc := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\necho 'runsc version release-20251110.0'\necho 'spec: 1.2.1'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := Version(context.Background(), runsc)
	if err != nil || v != "runsc version release-20251110.0" {
		t.Errorf("Version = %q, %v", v, err)
	}
}
