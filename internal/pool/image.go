package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"airlock/internal/config"
	"airlock/internal/errdefs"
	"airlock/internal/instance"
	"airlock/internal/runtimes"
)

// Pool images (gvisor.pool_image): a gVisor sandbox whose Python runtime
// imported pandas took seconds to build; restoring one from a checkpoint
// of its memory takes a fraction of that. So, per language whose runtime
// can reseed its random generators, the pool boots one sandbox with the
// pool's limits, checkpoints it before anything else can reach it (it
// never ran a client's code, and is never handed out: the checkpoint ends
// it), and builds that language's sandboxes from then on by restoring
// that image into a fresh sandbox, reseeding its runtime's generators
// from the kernel. What the restored sandboxes still share with each
// other, as the template's forks do natively: the interpreter's hash seed
// and its address-space layout (see the threat model). runsc reads the
// image only while its size and digest, summed beside it, match what the
// checkpoint returned (summed by the restores until a check has summed it
// once its files' change times settled, a second after it was made, then
// only when its files' identity changed: gvisor.Host.Seal); the image
// lives in the gVisor state directory, owner-only, and goes with the
// pool.

// imageLangs are the languages whose sandboxes may come from an image:
// their runtimes reseed their generators (Interp.Reseed). Node's cannot
// (V8's Math.random and OpenSSL's generator keep the image's state).
var imageLangs = map[string]bool{"python": true, "bash": true}

// poolImage is one language's image.
type poolImage struct {
	// parent holds the image (dir); removed with it.
	parent, dir string
	ck          instance.Checkpoint
	pid         int // the runtime's pid in the sandbox
	profile     config.Limits
}

// images are a pool's images, by language.
type images struct {
	mu sync.Mutex
	by map[string]*poolImage
}

// usesImage reports whether q's sandboxes are to be restored from an
// image: gVisor with a keeper, gvisor.pool_image on, no network.
func (p *Pool) usesImage(q *queue) bool {
	return p.cfg.GVisor.PoolImage && !q.net && imageLangs[q.rt.Lang] && instance.KeepsMemory(p.kernel)
}

// image returns lang's image, or nil.
func (p *Pool) image(lang string) *poolImage {
	p.imgs.mu.Lock()
	defer p.imgs.mu.Unlock()
	return p.imgs.by[lang]
}

// makeImage boots a sandbox of q's language with q's limits and
// checkpoints it into the image its later sandboxes are restored from.
// A failure is logged and leaves q booting its sandboxes.
func (p *Pool) makeImage(ctx context.Context, q *queue) {
	begun := time.Now()
	img, err := p.checkpointFresh(ctx, q)
	if err == nil {
		// Its sandbox is closed: only root on the host can change the
		// image now, and its restores check it by its files' identity
		// once that is recorded, while it stays as it is.
		if err = instance.SealMemory(ctx, p.kernel, img.memory()); err != nil {
			os.RemoveAll(img.parent)
		}
	}
	p.imgs.mu.Lock()
	defer p.imgs.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("pool: the gVisor image could not be made; booting its sandboxes", "language", q.rt.Lang, "err", err)
		}
		return
	}
	p.imgs.by[q.rt.Lang] = img
	p.log.Info("pool: gVisor image made", "language", q.rt.Lang, "bytes", img.ck.Bytes, "ms", time.Since(begun).Milliseconds())
}

// checkpointFresh builds a sandbox of q's language and checkpoints it.
func (p *Pool) checkpointFresh(ctx context.Context, q *queue) (_ *poolImage, err error) {
	g, ok := p.kernel.(instance.GVisor)
	if !ok {
		return nil, errors.New("not a gVisor kernel")
	}
	parent, err := os.MkdirTemp(g.Host.Dir(), ".pool-image-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(parent)
		}
	}()
	// With the keeper, a template's sandbox too: the image is its
	// checkpoint (the sandboxes restored from it run that keeper).
	g.Keep = true
	inst, err := instance.New(ctx, g, p.slots, q.rt, q.profile, false, nil, false)
	if err != nil {
		return nil, err
	}
	defer inst.Close()
	img := &poolImage{parent: parent, dir: filepath.Join(parent, "image"), pid: inst.Interp.Pid(), profile: q.profile}
	if img.ck, err = inst.Checkpoint(ctx, img.dir, imageMax(q.profile)); err != nil {
		return nil, err
	}
	return img, nil
}

// memory is the image as a restore takes it.
func (img *poolImage) memory() instance.Memory {
	return instance.Memory{Dir: img.dir, Checkpoint: img.ck, Pid: img.pid}
}

// imageMax is what an image of a sandbox with limits l may take on disk:
// its memory, gVisor's own, the keeper's.
func imageMax(l config.Limits) int64 { return int64(l.Memory) + 96<<20 }

// restoreImage builds an instance of rt with limits l from its image:
// restored with the image's limits (in the background for a refill, as
// newInstance's builds), its generators reseeded, then adapted to l. ok
// is false when there is no image for these.
func (p *Pool) restoreImage(ctx context.Context, rt runtimes.Runtime, l config.Limits, background bool) (_ *instance.Instance, ok bool, err error) {
	img := p.image(rt.Lang)
	if img == nil || (l != img.profile && !rt.Adapts(img.profile, l)) {
		return nil, false, nil
	}
	inst, err := instance.Restore(ctx, p.kernel, p.slots, rt, img.profile, img.memory(), nil, background)
	if err != nil {
		if errors.Is(err, errdefs.ErrImageCorrupt) {
			// Changed on disk under the server: never read again.
			p.dropImage(rt.Lang, img, err)
		}
		return nil, true, err
	}
	reseeded, err := inst.Interp.Reseed(ctx)
	if err != nil {
		inst.Close()
		return nil, true, fmt.Errorf("reseeding a sandbox restored from the pool's image: %w", err)
	}
	if !reseeded {
		// It would draw what every other one draws (bash without
		// $SRANDOM): this language's sandboxes are booted from now on.
		inst.Close()
		err := fmt.Errorf("the %s runtime cannot reseed its generators here", rt.Lang)
		p.dropImage(rt.Lang, img, err)
		return nil, true, err
	}
	if l != img.profile {
		if err := inst.Adapt(l); err != nil {
			inst.Close()
			return nil, true, err
		}
	}
	return inst, true, nil
}

// dropImage forgets lang's image img (changed on disk, or its runtime
// cannot reseed) and removes it.
func (p *Pool) dropImage(lang string, img *poolImage, why error) {
	p.imgs.mu.Lock()
	if p.imgs.by[lang] == img {
		delete(p.imgs.by, lang)
	}
	p.imgs.mu.Unlock()
	p.log.Error("pool: the gVisor image cannot be used; booting sandboxes", "language", lang, "err", why)
	instance.ForgetMemory(p.kernel, img.dir)
	// A restore reading it may still run: runsc holds its files open.
	os.RemoveAll(img.parent)
}

// closeImages removes every image (the pool is closed: nothing restores).
func (p *Pool) closeImages() {
	p.imgs.mu.Lock()
	defer p.imgs.mu.Unlock()
	for lang, img := range p.imgs.by {
		instance.ForgetMemory(p.kernel, img.dir)
		os.RemoveAll(img.parent)
		delete(p.imgs.by, lang)
	}
}
