package gvisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"airlock/internal/errdefs"
)

// TestVerifyStopsWithItsContext: the check of a memory image made while
// runsc restores it stops when the restore's context ends (its client
// left, the server shuts down), rather than reading the whole image
// first; with a live context it checks the image.
func TestVerifyStopsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), bytes.Repeat([]byte{1}, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := sumCheckpoint(context.Background(), dir, 16<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDigest(context.Background(), dir, want); err != nil {
		t.Errorf("the image as written: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := checkDigest(ctx, dir, want); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled check: %v", err)
	}
	wrong := want
	wrong.SHA256 = "00"
	if err := checkDigest(context.Background(), dir, wrong); !errors.Is(err, errdefs.ErrImageCorrupt) {
		t.Errorf("an image that does not match: %v", err)
	}
}
