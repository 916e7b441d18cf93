package pool

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/config"
	"airlock/internal/gvisor"
	"airlock/internal/instance"
	"airlock/internal/jail/jailtest"
	"airlock/internal/runtimes"
)

// imagePool starts a gVisor pool of one Python sandbox with
// gvisor.pool_image on.
func imagePool(t *testing.T) (*Pool, *gvisor.Host) {
	t.Helper()
	h, cfg := jailtest.Host(t, "poolimage", func(c *config.Config) {
		c.Pool.Size = map[string]int{"python": 1}
		c.Pool.MaxSize = nil
		c.Pool.Zygote = false
		c.GVisor.PoolImage = true
	})
	gh := jailtest.GVisorHost(t, h, cfg)
	// random imported before the checkpoint: its state is the image's.
	p := New(cfg, instance.GVisor{Host: gh, Preload: []string{"random"}}, instance.NewSlots(h.Layout()), slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	return p, gh
}

// draw runs code printing a draw of Python's random module in inst and
// returns its output.
func draw(t *testing.T, inst *instance.Instance) string {
	t.Helper()
	var mu sync.Mutex
	var out strings.Builder
	if err := inst.Attach(instance.OutputFunc(func(p []byte, stderr bool) {
		mu.Lock()
		defer mu.Unlock()
		out.Write(p)
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.Configure(ctx, runtimes.EnvMap(instance.RuntimeEnv(inst.Language(), inst.Limits())), "/workspace"); err != nil {
		t.Fatal(err)
	}
	if err := inst.Execute("d", "import random; print(random.getrandbits(64))", nil, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m, ok := <-inst.Messages():
			if !ok {
				t.Fatal("the runtime went away")
			}
			if m.ID == "d" && m.Type == "done" {
				inst.Drain()
				mu.Lock()
				defer mu.Unlock()
				return out.String()
			}
		case <-ctx.Done():
			t.Fatal("no done")
		}
	}
}

// A gVisor pool with pool_image restores its sandboxes from a checkpoint
// of a fresh one, the pooled one and one a drained pool builds alike,
// each with random state of its own, and without summing the image
// again once its identity is recorded; an image changed on disk is never
// used again (the sandbox is booted instead) and removed, as is the
// image when the pool closes.
func TestPoolImage(t *testing.T) {
	p, gh := imagePool(t)
	waitFor(t, "the image and a ready sandbox", func() bool { return p.image("python") != nil && pythonStats(p).Ready == 1 })
	img := p.image("python")
	// Its restores check it by its files' identity once a check has
	// summed it, its change times settled (a second after it was made).
	if !gh.Sealed(img.dir) {
		t.Error("the pool's image is not sealed")
	}
	waitFor(t, "the image's identity recorded", func() bool { return gh.Settled(img.dir) })
	// The refill restores in the background (the lowest CPU weight, from
	// before runsc starts), a request's own restore does not; the one
	// taken gets the normal weight.
	q := p.queues["python"]
	q.mu.Lock()
	ready := q.ready[0]
	q.mu.Unlock()
	if bg, err := ready.Background(); err != nil || !bg {
		t.Errorf("a sandbox the refill restored: Background() = %v, %v; want true", bg, err)
	}
	pooled := get(t, p)
	drained := get(t, p) // none ready: restored on the request's path
	for name, inst := range map[string]*instance.Instance{"pooled": pooled, "drained": drained} {
		if inst.RestoreTimes().Runsc == 0 {
			t.Errorf("the %s sandbox was not restored from the image", name)
		}
		if name == "drained" && inst.RestoreTimes().Summed {
			t.Error("a restore of the settled image summed it: its identity was not trusted")
		}
		if bg, err := inst.Background(); err != nil || bg {
			t.Errorf("the %s sandbox, taken: Background() = %v, %v; want false", name, bg, err)
		}
	}
	a, b := draw(t, pooled), draw(t, drained)
	if a == "" || a == b {
		t.Errorf("two sandboxes restored from one image drew %q and %q: the image's random state was not reseeded", a, b)
	}

	// A byte of the image changed: whatever restores it next refuses it.
	waitFor(t, "a ready sandbox", func() bool { return pythonStats(p).Ready == 1 })
	ents, err := os.ReadDir(img.dir)
	if err != nil {
		t.Fatal(err)
	}
	var biggest string
	var size int64
	for _, e := range ents {
		if st, err := e.Info(); err == nil && st.Size() > size {
			biggest, size = e.Name(), st.Size()
		}
	}
	f, err := os.OpenFile(filepath.Join(img.dir, biggest), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	bs := []byte{0}
	f.ReadAt(bs, size/2)
	bs[0] ^= 0xff
	if _, err := f.WriteAt(bs, size/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	get(t, p) // the ready one, restored before
	booted := get(t, p)
	if booted.RestoreTimes().Runsc != 0 {
		t.Error("a sandbox was restored from a changed image")
	}
	if got := draw(t, booted); got == "" {
		t.Error("the booted sandbox runs no code")
	}
	waitFor(t, "the changed image dropped", func() bool { return p.image("python") == nil })
	if gh.Sealed(img.dir) {
		t.Error("the dropped image is still sealed")
	}
	if _, err := os.Stat(img.parent); !os.IsNotExist(err) {
		t.Errorf("the changed image is still on disk: %v", err)
	}
	p.Close()
	left, _ := filepath.Glob(filepath.Join(gh.Dir(), ".pool-image-*"))
	if len(left) > 0 {
		t.Errorf("images left after the pool closed: %v", left)
	}
}

// The image of a closed pool is removed.
func TestPoolImageRemovedOnClose(t *testing.T) {
	p, gh := imagePool(t)
	waitFor(t, "the image", func() bool { return p.image("python") != nil })
	dir := p.image("python").dir
	p.Close()
	left, _ := filepath.Glob(filepath.Join(gh.Dir(), ".pool-image-*"))
	if len(left) > 0 {
		t.Errorf("images left after the pool closed: %v", left)
	}
	if gh.Sealed(dir) {
		t.Error("the closed pool's image is still sealed")
	}
}
