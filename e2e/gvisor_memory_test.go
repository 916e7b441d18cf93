package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/errdefs"
	"airlock/internal/testenv"
)

// gvisorMemoryConfig is a gVisor server whose pauses keep memory: the
// default with persistence (gvisor.checkpoint unset).
func gvisorMemoryConfig(t *testing.T, extra map[string]any) map[string]any {
	cfg := map[string]any{
		"isolation":   "gvisor",
		"gvisor":      map[string]any{"runsc": testenv.Runsc(t)},
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}, "zygote": false},
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// TestGVisorPauseKeepsMemory: by default, a gVisor session
// says before it pauses that its memory is kept; after a pause and a
// resume its variables, a second code context's and a background
// process are there, its files too; again after a server restart; a
// fork, of the live session and of the paused one, has them too; a
// memory image changed on disk is refused and the resume falls back to
// the files, saying so, the image kept for the operator; the image
// counts in the paused disk.
func TestGVisorPauseKeepsMemory(t *testing.T) {
	s := startServer(t, gvisorMemoryConfig(t, nil))
	ctx := context.Background()
	a := s.newSession("python", map[string]any{"auto_resume": true})
	info, err := s.c.Session(ctx, a)
	if err != nil || info.Restores != apitype.RestoreMemory {
		t.Fatalf("a gVisor session's restores: %+v %v", info, err)
	}
	r := s.exec(a, "import subprocess\nx = 41\nbg = subprocess.Popen(['sleep', '1000'])\nopen('/workspace/f', 'w').write('kept')\nprint(bg.pid)")
	if r.Error != nil {
		t.Fatalf("%+v", r.Error)
	}
	sh, err := s.c.CreateContext(ctx, a, apitype.CreateContextRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.execute(a, apitype.ExecuteRequest{Code: "y=7", Context: sh.ID}); err != nil || r.Error != nil {
		t.Fatalf("bash context: %+v %v", r, err)
	}

	p, err := s.c.PauseSession(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if p.Restores != apitype.RestoreMemory || p.Paused == nil || p.Paused.MemoryBytes <= 0 || p.Paused.DiskBytes < p.Paused.MemoryBytes || p.Paused.MemoryError != "" {
		t.Fatalf("paused: %+v %+v", p, p.Paused)
	}
	t.Logf("memory image %d bytes, %d on disk", p.Paused.MemoryBytes, p.Paused.DiskBytes)
	sc := s.scrape(s.URL+"/metrics", nil)
	if v := sc.value("airlock_paused_disk_bytes", nil); v < float64(p.Paused.DiskBytes) {
		t.Errorf("airlock_paused_disk_bytes %v, the session says %d", v, p.Paused.DiskBytes)
	}
	res, err := s.c.ResumeSession(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != apitype.RestoreMemory || res.RestoredReason != "" {
		log := s.stderr.String()
		log = log[max(0, len(log)-6000):]
		t.Fatalf("resumed: %+v\n%s", res, log)
	}
	checkKept := func(s *server, want string) {
		t.Helper()
		r := s.exec(a, "x += 1\nprint(x, bg.poll(), open('/workspace/f').read())")
		if r.Error != nil || r.Stdout != want {
			t.Errorf("after the resume: %q %+v (want %q)", r.Stdout, r.Error, want)
		}
		if r, err := s.execute(a, apitype.ExecuteRequest{Code: "echo $y", Context: sh.ID}); err != nil || r.Stdout != "7\n" {
			t.Errorf("the bash context after the resume: %+v %v", r, err)
		}
	}
	checkKept(s, "42 None kept\n")

	// A fork of the live session has its memory (a snapshot: the
	// source runs on), and goes its own way.
	f, err := s.c.ForkSession(ctx, a)
	if err != nil || f.Restored != apitype.RestoreMemory || f.RestoredReason != "" {
		t.Fatalf("a fork of the live session: %+v %v", f, err)
	}
	if r := s.exec(f.ID, "x += 100\nprint(x, bg.poll(), open('/workspace/f').read())"); r.Error != nil || r.Stdout != "142 None kept\n" {
		t.Errorf("the fork: %q %+v", r.Stdout, r.Error)
	}
	if r, err := s.execute(f.ID, apitype.ExecuteRequest{Code: "echo $y", Context: sh.ID}); err != nil || r.Stdout != "7\n" {
		t.Errorf("the fork's bash context: %+v %v", r, err)
	}
	s.c.DeleteSession(ctx, f.ID)

	// A restart pauses it with its memory, and the next server resumes
	// it so (auto_resume).
	s2 := restart(t, s, syscall.SIGTERM)
	if d, err := s2.c.Session(ctx, a); err != nil || d.State != apitype.StatePaused || d.Restores != apitype.RestoreMemory {
		t.Fatalf("after the restart: %+v %v", d, err)
	}
	// A fork of the paused session restores its memory image, which
	// stays the session's.
	f, err = s2.c.ForkSession(ctx, a)
	if err != nil || f.Restored != apitype.RestoreMemory {
		t.Fatalf("a fork of the paused session: %+v %v", f, err)
	}
	if r := s2.exec(f.ID, "print(x, bg.poll())"); r.Error != nil || r.Stdout != "42 None\n" {
		t.Errorf("the fork of the paused session: %q %+v", r.Stdout, r.Error)
	}
	s2.c.DeleteSession(ctx, f.ID)
	checkKept(s2, "43 None kept\n")
	if d, _ := s2.c.Session(ctx, a); d.Restored != apitype.RestoreMemory {
		t.Errorf("restored after the restart: %q (%s)", d.Restored, d.RestoredReason)
	}

	// A modified memory image: refused; the files come back instead.
	if _, err := s2.c.PauseSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	memDir := filepath.Join(dataDir(s2), "sessions", a, "memory")
	ents, err := os.ReadDir(memDir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("the memory image: %v %v", ents, err)
	}
	mf := filepath.Join(memDir, ents[len(ents)-1].Name())
	b, _ := os.ReadFile(mf)
	b[len(b)/2] ^= 0xff
	os.WriteFile(mf, b, 0o600)
	res, err = s2.c.ResumeSession(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != apitype.RestoreFiles || !strings.Contains(res.RestoredReason, "digest") {
		t.Errorf("a modified memory image: restored %q, %q", res.Restored, res.RestoredReason)
	}
	if r := s2.exec(a, "print(open('/workspace/f').read())"); r.Stdout != "kept\n" {
		t.Errorf("files after the fallback: %+v", r)
	}
	if r := s2.exec(a, "x"); r.Error == nil || r.Error.Name != "NameError" {
		t.Errorf("a variable of a refused memory image: %+v", r)
	}
	// The refused memory image is kept for the operator, as it was.
	kept, _ := filepath.Glob(filepath.Join(dataDir(s2), "sessions", ".kept-memory-"+a+"-*"))
	if len(kept) != 1 {
		t.Errorf("the refused memory image was not kept: %v", kept)
	} else {
		if got, _ := os.ReadFile(filepath.Join(kept[0], "memory", filepath.Base(mf))); !bytes.Equal(got, b) {
			t.Errorf("the kept memory image is not the one refused")
		}
		os.RemoveAll(kept[0])
	}
	// Nothing is left of the pauses, restores and the relays.
	s2.c.DeleteSession(ctx, a)
	s2.stop()
	left := append(checkNothingLeft(s2.name), runscProcs(s2.name)...)
	for _, d := range []string{filepath.Join("/run", s2.name, "gvisor"), filepath.Join(dataDir(s2), "sessions")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.Name() != keepersDir { // the keeper's copy, kept for the next start
				left = append(left, d+": "+e.Name())
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// keepersDir, under persistence.dir, holds the copies of the gVisor
// keepers sandboxes run, named by their digests.
const keepersDir = ".gvisor-keepers"

// keeperCopies lists the keeper copies of s's server.
func keeperCopies(t *testing.T, s *server) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir(s), "sessions", keepersDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// anotherAirlock builds airlock again, another build than the tests'
// (a plain go build, its gVisor package, the keeper's, compiled without
// optimisations): its keeper's code is not the other's.
func anotherAirlock(t *testing.T) string {
	t.Helper()
	airlockBinary(t) // the privileged tier's skip
	bin := filepath.Join(t.TempDir(), "airlock-next")
	build := exec.Command("go", "build", "-gcflags=airlock/internal/gvisor=-N -l", "-o", bin, "../cmd/airlock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// stopAndStart stops s with SIGTERM (its sessions pause) and starts its
// server again with the binary bin.
func stopAndStart(t *testing.T, s *server, bin string) *server {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("server exit: %v\n%s", err, s.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not stop:\n%s", s.stderr.String())
	}
	return startServerNamedBin(t, bin, s.name, s.cfg)
}

// TestGVisorMemoryAcrossUpgrade: gVisor sessions paused with their
// memory by one build of airlock resume with it on the next build, whose
// keeper is another: the resume binds the keeper the pause recorded,
// whose copy is kept beside the paused sessions while one needs it (a
// start removes it once none does, and keeps it before); without that
// copy the resume brings the files back and says why; while the server
// runs, a sweep after an image goes removes the copy once no paused
// session and no live sandbox needs it. checked against mutants: the
// restore binding the server's own keeper (resumed "files": the
// restored keeper died of SIGSEGV), a start's sweep ignoring the paused
// sessions' keepers (the copy was gone, resumed "files"), the sweep
// ignoring the live sandboxes' keepers (the copy went under a), no
// sweep after a delete (the copy stayed).
func TestGVisorMemoryAcrossUpgrade(t *testing.T) {
	next := anotherAirlock(t)
	s := startServer(t, gvisorMemoryConfig(t, map[string]any{"log": map[string]any{"level": "debug"}}))
	ctx := context.Background()
	a, b := s.newSession("python", nil), s.newSession("python", nil)
	for _, id := range []string{a, b} {
		if r := s.exec(id, "x = 41"); r.Error != nil {
			t.Fatalf("%+v", r.Error)
		}
	}
	first := keeperCopies(t, s)
	if len(first) != 1 {
		t.Fatalf("keeper copies %v", first)
	}
	old := filepath.Join(dataDir(s), "sessions", keepersDir, first[0])
	age := func() {
		t.Helper()
		then := time.Now().Add(-2 * time.Hour) // past the sweep's grace
		if err := os.Chtimes(old, then, then); err != nil {
			t.Fatal(err)
		}
	}

	// The upgrade: both pause with their memory; the new server, its
	// own keeper beside, keeps the old one they need however old.
	s = stopAndStart(t, s, next)
	age()
	s = stopAndStart(t, s, next)
	if got := keeperCopies(t, s); len(got) != 2 || !slices.Contains(got, first[0]) {
		t.Fatalf("keeper copies after the upgrade: %v (the old one was %s)", got, first[0])
	}
	res, err := s.c.ResumeSession(ctx, a)
	if err != nil || res.Restored != apitype.RestoreMemory {
		log := s.stderr.String()
		t.Fatalf("resumed after the upgrade: %+v %v\n%s", res, err, log[max(0, len(log)-4000):])
	}
	if r := s.exec(a, "x += 1\nprint(x)"); r.Error != nil || r.Stdout != "42\n" {
		t.Errorf("after the upgrade: %q %+v", r.Stdout, r.Error)
	}

	// Without the old keeper's copy, the files, saying why.
	aside := filepath.Join(t.TempDir(), "keeper")
	if err := os.Rename(old, aside); err != nil {
		t.Fatal(err)
	}
	res, err = s.c.ResumeSession(ctx, b)
	if err != nil || res.Restored != apitype.RestoreFiles || !strings.Contains(res.RestoredReason, "keeper") {
		t.Fatalf("resumed without its keeper: %+v %v", res, err)
	}
	if r := s.exec(b, "x"); r.Error == nil || r.Error.Name != "NameError" {
		t.Errorf("a variable of a memory image not restored: %+v", r)
	}

	// While the server runs, a sweep follows every image that goes (a
	// resume, a delete, an expiry): the old copy stays while a live
	// sandbox restored from it runs (a is: its next pause names it),
	// and goes once none does and no paused session needs it.
	if err := os.Rename(aside, old); err != nil {
		t.Fatal(err)
	}
	age()
	sweeps := func() int { return strings.Count(s.stderr.String(), "gVisor keepers swept") }
	pauseAndDelete := func() {
		t.Helper()
		n := sweeps()
		c := s.newSession("python", nil)
		if _, err := s.c.PauseSession(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.c.DeleteSession(ctx, c); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); sweeps() <= n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no sweep after a paused session was deleted:\n%s", s.stderr.String())
			}
		}
	}
	pauseAndDelete()
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the old copy went while a sandbox restored from it runs: %v", err)
	}
	if err := s.c.DeleteSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	pauseAndDelete()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old copy stayed once nothing needs it: %v", err)
	}

	// And the next start removes nothing it needs.
	s.c.DeleteSession(ctx, b)
	s = stopAndStart(t, s, next)
	if got := keeperCopies(t, s); len(got) != 1 || got[0] == first[0] {
		t.Errorf("keeper copies once no paused session needs the old one: %v", got)
	}
}

// A gVisor sandbox runs the keeper (a relay per program) only where its
// session can keep its memory: one with a network has runsc's own init
// and says restores "files", one without has the keeper and says
// "memory". checked against mutants: the keeper in every sandbox (the
// networked one ran it), and in none (restores "files").
func TestGVisorKeeperOnlyWhereKept(t *testing.T) {
	cfg := gvisorMemoryConfig(t, nil)
	cfg["pool"] = map[string]any{"size": map[string]int{"python": 1, "bash": 0, "javascript": 0}, "network_size": map[string]int{"python": 1}, "zygote": false}
	s := startServer(t, cfg)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		extra  map[string]any
		keeper bool
	}{
		{"no network", nil, true},
		{"a network", map[string]any{"network": map[string]any{"allow": []string{"example.com"}}}, false},
	} {
		id := s.newSession("python", tc.extra)
		r := s.exec(id, "print(open('/proc/1/cmdline').read().replace('\\0', ' '))")
		if r.Error != nil {
			t.Fatalf("%s: %+v", tc.name, r.Error)
		}
		if got := strings.Contains(r.Stdout, "__airlock-gvisor-keeper"); got != tc.keeper {
			t.Errorf("%s: the sandbox's init is %q: the keeper %v, want %v", tc.name, r.Stdout, got, tc.keeper)
		}
		want := map[bool]string{true: apitype.RestoreMemory, false: apitype.RestoreFiles}[tc.keeper]
		if info, err := s.c.Session(ctx, id); err != nil || info.Restores != want {
			t.Errorf("%s: restores %q %v, want %q", tc.name, info.Restores, err, want)
		}
		s.c.DeleteSession(ctx, id)
	}
}

// The memory image counts against the tenant's paused-disk quota: a
// session whose tenant has no room left for it says restores "files"
// before it pauses (its memory's reservation, what its sandbox holds
// and a margin, is over 8 MiB), and its pause keeps the files, saying
// why.
func TestGVisorPauseMemoryQuota(t *testing.T) {
	cfg := gvisorMemoryConfig(t, map[string]any{"quotas": map[string]any{"max_paused_bytes": 8 << 20}})
	cfg["server"] = map[string]any{"auth": "keys"}
	s := startServer(t, cfg)
	c := s.as(s.newKey("acme"))
	ctx := context.Background()
	sess, err := c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Restores != apitype.RestoreFiles {
		t.Errorf("restores %q with no room in the quota for its memory, want files", sess.Restores)
	}
	p, err := c.PauseSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Restores != apitype.RestoreFiles || p.Paused.MemoryBytes != 0 || !strings.Contains(p.Paused.MemoryError, "quota") {
		t.Errorf("paused over the quota: %+v %+v", p, p.Paused)
	}
	res, err := c.ResumeSession(ctx, sess.ID)
	if err != nil || res.Restored != apitype.RestoreFiles {
		t.Errorf("resumed: %+v %v", res, err)
	}
	c.DeleteSession(ctx, sess.ID)
}

// TestGVisorForksReseeded: forks with memory of one session draw
// numbers of their own from Python's random and numpy's global
// generator (each reseeded from the kernel when it attaches), in the
// default context and in a Python code context, and from bash's
// $RANDOM in a bash one, and differ from their source; each fork says
// every runtime confirmed its reseed (reseeded), and one with a
// JavaScript context, whose runtime cannot, names it (not_reseeded); a
// resume, the same session again, keeps its generators.
func TestGVisorForksReseeded(t *testing.T) {
	s := startServer(t, gvisorMemoryConfig(t, nil))
	ctx := context.Background()
	a := s.newSession("python", nil)
	py, err := s.c.CreateContext(ctx, a, apitype.CreateContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := s.c.CreateContext(ctx, a, apitype.CreateContextRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	const setup = "import random, numpy as np\nrandom.seed(7)\nnp.random.seed(7)\nst = (random.getstate(), np.random.get_state()[1].tobytes())"
	const draw = "print(random.random(), float(np.random.rand()))"
	setups := map[string]string{"": setup, py.ID: setup, sh.ID: "RANDOM=7"}
	draws := map[string]string{"": draw, py.ID: draw, sh.ID: "echo $RANDOM $RANDOM $RANDOM"}
	for c, code := range setups {
		if r, err := s.execute(a, apitype.ExecuteRequest{Code: code, Context: c}); err != nil || r.Error != nil {
			t.Fatalf("setup in %q: %+v %v", c, r, err)
		}
	}
	drawn := map[string]string{} // what each drew, by session and context
	for i := 0; i < 2; i++ {
		f, err := s.c.ForkSession(ctx, a)
		if err != nil || f.Restored != apitype.RestoreMemory {
			t.Fatalf("fork %d: %+v %v", i, f, err)
		}
		// Every runtime confirmed its reseed, and the fork says so.
		if f.Reseeded == nil || !*f.Reseeded || len(f.NotReseeded) > 0 {
			t.Errorf("fork %d: reseeded %v, not reseeded %v", i, f.Reseeded, f.NotReseeded)
		}
		for c, code := range draws {
			r, err := s.execute(f.ID, apitype.ExecuteRequest{Code: code, Context: c})
			if err != nil || r.Error != nil {
				t.Fatalf("fork %d, context %q: %+v %v", i, c, r, err)
			}
			for k, v := range drawn {
				if v == r.Stdout {
					t.Errorf("fork %d, context %q drew what %s drew: %q", i, c, k, v)
				}
			}
			drawn[fmt.Sprintf("fork %d, context %q", i, c)] = r.Stdout
		}
		s.c.DeleteSession(ctx, f.ID)
	}
	// A runtime that cannot confirm a reseed (JavaScript's Math.random
	// cannot be reseeded) is named in the fork's description.
	js, err := s.c.CreateContext(ctx, a, apitype.CreateContextRequest{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.c.ForkSession(ctx, a)
	if err != nil || f.Restored != apitype.RestoreMemory {
		t.Fatalf("a fork with a JavaScript context: %+v %v", f, err)
	}
	if f.Reseeded == nil || *f.Reseeded || !slices.Equal(f.NotReseeded, []string{js.ID}) {
		t.Errorf("a fork with a JavaScript context: reseeded %v, not reseeded %v (want [%s])", f.Reseeded, f.NotReseeded, js.ID)
	}
	if d, err := s.c.Session(ctx, f.ID); err != nil || d.Reseeded == nil || *d.Reseeded || len(d.NotReseeded) != 1 {
		t.Errorf("the fork's description: %+v %v", d, err)
	}
	s.c.DeleteSession(ctx, f.ID)
	if err := s.c.DeleteContext(ctx, a, js.ID); err != nil {
		t.Fatal(err)
	}
	// The source was not reseeded by its forks, nor by a pause and
	// resume: its generators are where random.seed(7) left them.
	if _, err := s.c.PauseSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if res, err := s.c.ResumeSession(ctx, a); err != nil || res.Restored != apitype.RestoreMemory || res.Reseeded != nil {
		t.Fatalf("resumed: %+v %v", res, err)
	}
	for _, c := range []string{"", py.ID} {
		r, err := s.execute(a, apitype.ExecuteRequest{Code: "print(st == (random.getstate(), np.random.get_state()[1].tobytes()))\n" + draw, Context: c})
		if err != nil || r.Error != nil || !strings.HasPrefix(r.Stdout, "True\n") {
			t.Fatalf("the resumed source, context %q: %+v %v", c, r, err)
		}
		for k, v := range drawn {
			if "True\n"+v == r.Stdout {
				t.Errorf("the source, context %q, drew what %s drew: %q", c, k, v)
			}
		}
	}
	s.c.DeleteSession(ctx, a)
}

// TestGVisorCheckpointDefault: gvisor.checkpoint unset keeps memory
// wherever the server runs gVisor sessions and pauses them, and the API
// says so per session before any pause: on a native server that allows
// gVisor, a gVisor session restores "memory" and a native one "files".
// gvisor.checkpoint false pauses a gVisor session with its files only
// (the interpreter restarts). doctor says which and why; a runsc that
// cannot checkpoint makes doctor fail and the server refuse to start
// rather than pause with less, unless checkpoint is false.
func TestGVisorCheckpointDefault(t *testing.T) {
	runsc := testenv.Runsc(t)
	ctx := context.Background()
	s := startServer(t, map[string]any{
		"isolation": "native", "allow_isolation": []string{"gvisor"},
		"gvisor":      map[string]any{"runsc": runsc},
		"persistence": map[string]any{"enabled": true},
		"pool":        map[string]any{"size": map[string]int{"python": 0, "bash": 0, "javascript": 0}, "zygote": false},
	})
	for iso, want := range map[string]string{"gvisor": apitype.RestoreMemory, "native": apitype.RestoreFiles} {
		id := s.newSession("bash", map[string]any{"isolation": iso})
		if info, err := s.c.Session(ctx, id); err != nil || info.Restores != want {
			t.Errorf("a %s session on a native server allowing gVisor: restores %q %v, want %q", iso, info.Restores, err, want)
		}
		s.c.DeleteSession(ctx, id)
	}
	s.stop()

	off := startServer(t, gvisorMemoryConfig(t, map[string]any{"gvisor": map[string]any{"runsc": runsc, "checkpoint": false}}))
	a := off.newSession("python", nil)
	if info, err := off.c.Session(ctx, a); err != nil || info.Restores != apitype.RestoreFiles {
		t.Fatalf("checkpoint false: restores %q %v", info.Restores, err)
	}
	if r := off.exec(a, "x = 1\nopen('/workspace/f', 'w').write('kept')"); r.Error != nil {
		t.Fatalf("%+v", r.Error)
	}
	if p, err := off.c.PauseSession(ctx, a); err != nil || p.Paused.MemoryBytes != 0 || p.Restores != apitype.RestoreFiles {
		t.Fatalf("checkpoint false, paused: %+v %v", p, err)
	}
	if res, err := off.c.ResumeSession(ctx, a); err != nil || res.Restored != apitype.RestoreFiles {
		t.Fatalf("checkpoint false, resumed: %+v %v", res, err)
	}
	if r := off.exec(a, "print(open('/workspace/f').read())\nx"); r.Stdout != "kept\n" || r.Error == nil || r.Error.Name != "NameError" {
		t.Errorf("checkpoint false, after the resume: %q %+v", r.Stdout, r.Error)
	}
	off.c.DeleteSession(ctx, a)
	off.stop()

	doctor := func(runsc, checkpoint string) (string, int) {
		gv := `"runsc": "` + runsc + `"`
		if checkpoint != "" {
			gv += `, "checkpoint": ` + checkpoint
		}
		cfg := writeFile(t, "gvisor.json", `{"isolation": "gvisor", "gvisor": {`+gv+`}, "persistence": {"enabled": true}}`)
		out, _, code := runCLI(t, "", "doctor", "--json", "--config", cfg)
		return out, code
	}
	out, code := doctor(runsc, "")
	if code != 0 || !strings.Contains(out, `"name":"gvisor checkpoint","status":"ok"`) || !strings.Contains(out, "gvisor.checkpoint unset: on") {
		t.Errorf("doctor, checkpoint unset: %d %s", code, out)
	}
	out, code = doctor(runsc, "false")
	if code != 0 || !strings.Contains(out, `"name":"gvisor checkpoint","status":"off"`) || !strings.Contains(out, "files only") {
		t.Errorf("doctor, checkpoint false: %d %s", code, out)
	}
	// A runsc that boots sandboxes but cannot checkpoint them.
	fake := filepath.Join(t.TempDir(), "runsc")
	os.WriteFile(fake, []byte("#!/bin/sh\nfor a; do [ \"$a\" = checkpoint ] && { echo 'checkpoint is not supported' >&2; exit 1; }; done\nexec "+runsc+" \"$@\"\n"), 0o755)
	out, code = doctor(fake, "")
	if code != 69 || !strings.Contains(out, `"name":"gvisor checkpoint","status":"FAIL"`) || !strings.Contains(out, "checkpoint is not supported") {
		t.Errorf("doctor, a runsc that cannot checkpoint: %d %s", code, out)
	}
	if out, code = doctor(fake, "false"); code != 0 {
		t.Errorf("doctor, a runsc that cannot checkpoint, checkpoint false: %d %s", code, out)
	}
	cfgPath := writeFile(t, "serve.json", `{"isolation": "gvisor", "gvisor": {"runsc": "`+fake+`"}, "persistence": {"enabled": true}, "state_dir": "/run/airlock-e2e-refuse", "data_dir": "/run/airlock-e2e-refuse/data", "cgroup_parent": "airlock-e2e-refuse", "server": {"listen": "127.0.0.1:0", "auth": "none"}, "pool": {"size": {"python": 0, "bash": 0, "javascript": 0}}}`)
	// Bounded: a server that does start (the refusal broken) is stopped.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	serve := exec.CommandContext(sctx, airlockBinary(t), "serve", "--config", cfgPath)
	serve.Cancel = func() error { return serve.Process.Signal(syscall.SIGTERM) }
	serve.WaitDelay = 30 * time.Second
	var errOut bytes.Buffer
	serve.Stderr = &errOut
	serve.Run()
	if code := serve.ProcessState.ExitCode(); code != 69 || !strings.Contains(errOut.String(), "gvisor.checkpoint unset: on") || !strings.Contains(errOut.String(), "checkpoint is not supported") {
		t.Errorf("serve with a runsc that cannot checkpoint: %d %s", code, errOut.String())
	}
	if left := checkNothingLeft("airlock-e2e-refuse"); len(left) > 0 {
		t.Errorf("a refused server left: %v", left)
	}
	os.RemoveAll("/run/airlock-e2e-refuse")
}

// TestGVisorPauseFilesOnly: on a server whose gVisor pauses keep
// memory, a pause asked for the files only (restores "files") writes no
// memory image: the paused session says restores "files" and counts its
// files alone; its resume says restored "files" with no reason, its
// variable is gone and its file kept, and it says restores "memory"
// again; a fork of such a paused session has the files; a session
// created with on_timeout_restores "files" pauses so on its timeout; a
// pause with memory resumed asked for the files only ({"restores":
// "files"}) has its files, its variable gone.
func TestGVisorPauseFilesOnly(t *testing.T) {
	s := startServer(t, gvisorMemoryConfig(t, nil))
	ctx := context.Background()
	a := s.newSession("python", nil)
	if r := s.exec(a, "x = 41\nopen('/workspace/f', 'w').write('kept')"); r.Error != nil {
		t.Fatalf("%+v", r.Error)
	}
	p, err := s.c.PauseSessionWith(ctx, a, apitype.PauseRequest{Restores: apitype.RestoreFiles})
	if err != nil {
		t.Fatal(err)
	}
	if p.Restores != apitype.RestoreFiles || p.Paused == nil || p.Paused.MemoryBytes != 0 || p.Paused.MemoryError != "" || p.Paused.Files != 1 {
		t.Fatalf("a files-only pause: %+v %+v", p, p.Paused)
	}
	img := filepath.Join(dataDir(s), "sessions", a)
	if _, err := os.Stat(filepath.Join(img, "memory")); !os.IsNotExist(err) {
		t.Errorf("a files-only pause wrote a memory image: %v", err)
	}
	if d, err := s.c.Session(ctx, a); err != nil || d.Restores != apitype.RestoreFiles {
		t.Errorf("described paused: %+v %v", d, err)
	}
	goneKept := func(id, what string) {
		t.Helper()
		if r := s.exec(id, "x"); r.Error == nil || r.Error.Name != "NameError" {
			t.Errorf("%s: the variable of a files-only pause: %+v", what, r)
		}
		if r := s.exec(id, "print(open('/workspace/f').read())"); r.Error != nil || r.Stdout != "kept\n" {
			t.Errorf("%s: the file of a files-only pause: %+v", what, r)
		}
	}
	// A fork of the paused session: its files.
	f, err := s.c.ForkSession(ctx, a)
	if err != nil || f.Restored != apitype.RestoreFiles || f.RestoredReason != "" {
		t.Fatalf("a fork of a files-only pause: %+v %v", f, err)
	}
	goneKept(f.ID, "the fork")
	s.c.DeleteSession(ctx, f.ID)
	res, err := s.c.ResumeSession(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != apitype.RestoreFiles || res.RestoredReason != "" || res.Restores != apitype.RestoreMemory {
		t.Errorf("resumed: restored %q (%s), restores %q", res.Restored, res.RestoredReason, res.Restores)
	}
	goneKept(a, "the resumed session")

	// A pause with its memory, resumed asked for the files only.
	s.exec(a, "x = 41")
	if p, err := s.c.PauseSession(ctx, a); err != nil || p.Paused.MemoryBytes == 0 {
		t.Fatalf("a pause with memory: %+v %v", p, err)
	}
	res, err = s.c.ResumeSessionWith(ctx, a, apitype.ResumeRequest{Restores: apitype.RestoreFiles})
	if err != nil || res.Restored != apitype.RestoreFiles || res.RestoredReason != "" {
		t.Fatalf("a memory pause resumed with its files: %+v %v", res, err)
	}
	goneKept(a, "a memory pause resumed with its files")
	s.c.DeleteSession(ctx, a)

	// The pause on its timeout, asked for the files only.
	b, err := s.c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", Timeout: apitype.Duration(2 * time.Second),
		OnTimeout: apitype.OnTimeoutPause, OnTimeoutRestores: apitype.RestoreFiles})
	if err != nil {
		t.Fatal(err)
	}
	if b.OnTimeoutRestores != apitype.RestoreFiles || b.Restores != apitype.RestoreMemory {
		t.Errorf("created: %+v", b)
	}
	s.exec(b.ID, "y = 1")
	deadline := time.Now().Add(30 * time.Second)
	d, err := s.c.Session(ctx, b.ID)
	for err == nil && d.State != apitype.StatePaused && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		d, err = s.c.Session(ctx, b.ID)
	}
	if err != nil || d.State != apitype.StatePaused || d.Restores != apitype.RestoreFiles || d.Paused.MemoryBytes != 0 || d.Paused.MemoryError != "" {
		t.Fatalf("paused on its timeout: %+v %v", d, err)
	}
	s.c.DeleteSession(ctx, b.ID)

	if _, err := s.c.CreateSession(ctx, apitype.CreateSessionRequest{Language: "python", OnTimeoutRestores: apitype.RestoreFiles}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("on_timeout_restores without on_timeout pause: %v", err)
	}

	s.stop()
	left := append(checkNothingLeft(s.name), runscProcs(s.name)...)
	if ents, _ := os.ReadDir(filepath.Join(dataDir(s), "sessions")); len(ents) > 0 {
		left = append(left, "sessions: "+ents[0].Name())
	}
	if len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// TestGVisorKillDuringMemoryPause: the server is killed (SIGKILL) during
// pauses that keep a gVisor session's memory; after each restart the
// session is paused, either with its memory or with its files and a
// memory_error saying the memory was lost (or, killed before its image
// was in place, recovered from its recovery point); its files resume
// intact, its variables too when its memory came back, and a resume
// that lost the memory says why in restored_reason. One round kills it
// while the checkpoint is written (its temporary directory there: the
// memory is lost), two at random points. Nothing is left behind: no
// runsc process, cgroup, mount or directory of the killed sandboxes.
func TestGVisorKillDuringMemoryPause(t *testing.T) {
	s := startServer(t, gvisorMemoryConfig(t, nil))
	ctx := context.Background()
	const checkpointing, random = "checkpointing", "random"
	outcomes := map[string]int{}
	for round, at := range []string{checkpointing, random, random} {
		id := s.newSession("python", nil)
		if r := s.exec(id, "x = 41\nopen('/workspace/f', 'w').write('kept')"); r.Error != nil {
			t.Fatalf("round %d: %+v", round, r.Error)
		}
		waitPoint(t, s, id, "f")
		sessions := filepath.Join(dataDir(s), "sessions")
		go s.c.PauseSession(ctx, id)
		switch at {
		case checkpointing:
			waitEntry(t, sessions, func(name string) bool { return strings.HasPrefix(name, ".tmp-mem-"+id+"-") })
		default:
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
		}
		s = restart(t, s, syscall.SIGKILL)
		info, err := s.c.Session(ctx, id)
		if err != nil || info.State != apitype.StatePaused || info.Paused == nil {
			t.Fatalf("round %d (%s): after the restart: %+v %v", round, at, info, err)
		}
		var outcome string
		switch {
		case info.Paused.Recovered != "":
			outcome = "recovered"
		case info.Paused.MemoryError != "":
			outcome = "files"
			if info.Restores != apitype.RestoreFiles {
				t.Errorf("round %d (%s): memory lost (%s), yet restores %q", round, at, info.Paused.MemoryError, info.Restores)
			}
		default:
			outcome = "memory"
			if info.Restores != apitype.RestoreMemory || info.Paused.MemoryBytes <= 0 {
				t.Errorf("round %d (%s): neither memory nor a memory_error: %+v %+v", round, at, info, info.Paused)
			}
		}
		outcomes[outcome]++
		if at == checkpointing && outcome != "files" {
			t.Errorf("round %d: killed while the checkpoint was written, the session is %s, want its files with a memory_error", round, outcome)
		}
		res, err := s.c.ResumeSession(ctx, id)
		if err != nil {
			t.Fatalf("round %d (%s): resume: %v", round, at, err)
		}
		want := "kept\n"
		if outcome == "memory" {
			if res.Restored != apitype.RestoreMemory {
				t.Errorf("round %d (%s): a memory image resumed as %q (%s)", round, at, res.Restored, res.RestoredReason)
			}
			want = "42 kept\n"
		} else if res.Restored != apitype.RestoreFiles || res.RestoredReason == "" {
			t.Errorf("round %d (%s, %s): resumed %q with no restored_reason saying what was lost", round, at, outcome, res.Restored)
		}
		code := "print(open('/workspace/f').read())"
		if outcome == "memory" {
			code = "x += 1\nprint(x, open('/workspace/f').read())"
		}
		if r := s.exec(id, code); r.Error != nil || r.Stdout != want {
			t.Errorf("round %d (%s, %s): after the resume %q %+v, want %q", round, at, outcome, r.Stdout, r.Error, want)
		}
		s.c.DeleteSession(ctx, id)
	}
	t.Logf("killed during memory pauses: %v", outcomes)
	s.stop()
	left := append(checkNothingLeft(s.name), runscProcs(s.name)...)
	for _, d := range []string{filepath.Join("/run", s.name, "gvisor"), filepath.Join(dataDir(s), "sessions")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.Name() != keepersDir {
				left = append(left, d+": "+e.Name())
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}
