package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"airlock/internal/apitype"
	"airlock/internal/config"
	"airlock/internal/jail"
	"airlock/internal/jail/jailtest"
	"airlock/internal/runtimes"
	"airlock/internal/workspace"
)

// The test binary is what the jail host re-executes as each sandbox's init.
func TestMain(m *testing.M) { jail.RunTests(m) }

func testHost(t *testing.T) (*jail.Host, config.Config) {
	t.Helper()
	return jailtest.Host(t, "instance")
}

// testKernels are the kernels the instance tests run on: native, and
// gVisor (skipped, or failed in a strict run, without runsc).
func testKernels(t *testing.T, h *jail.Host, cfg config.Config) map[config.Isolation]func(*testing.T) Kernel {
	return map[config.Isolation]func(*testing.T) Kernel{
		config.Native: func(*testing.T) Kernel { return Native{Host: h} },
		config.GVisor: func(t *testing.T) Kernel {
			return GVisor{Host: jailtest.GVisorHost(t, h, cfg), Preload: []string{"json"}}
		},
	}
}

// An instance of every language on every kernel, built cold, through its
// exported API only (what pool and session use): it starts healthy, takes
// its environment, runs code whose output arrives before its done,
// reports its end when its sandbox is killed, and leaves nothing behind.
func TestInstanceLifecycle(t *testing.T) {
	h, cfg := testHost(t)
	for iso, kernel := range testKernels(t, h, cfg) {
		t.Run(string(iso), func(t *testing.T) { testInstanceLifecycle(t, h, cfg, kernel(t)) })
	}
}

func testInstanceLifecycle(t *testing.T, h *jail.Host, cfg config.Config, k Kernel) {
	prefix := map[config.Isolation]string{config.Native: "s-", config.GVisor: GVisorPrefix}[k.Isolation()]
	code := map[string]string{
		"python":     "import os; print('hi', os.environ['GREETING'], os.environ.get('EXTRA', '-'))",
		"bash":       "echo hi $GREETING ${EXTRA--}",
		"javascript": "console.log('hi', process.env.GREETING, process.env.EXTRA ?? '-')",
	}
	slots := &Slots{}
	for _, lang := range runtimes.Names() {
		t.Run(lang, func(t *testing.T) {
			rt, err := runtimes.Lookup(cfg, lang)
			if err != nil {
				t.Fatal(err)
			}
			l := cfg.Defaults
			l.Memory = 256 << 20
			ctx := context.Background()
			src := &Cold{Kernel: k, Slots: slots}
			// Python asks for a sandbox that can reach a network: on
			// gVisor it boots in a namespace of airlock's own.
			net := lang == "python"
			inst, err := src.Get(ctx, rt, l, net)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := inst.NetNS(); ok != (net || !k.NetworkAtStart()) {
				t.Errorf("network namespace handle: %v (asked for a network: %v)", ok, net)
			}
			closed := false
			defer func() {
				if !closed {
					inst.Close()
				}
			}()
			if !inst.Healthy() || inst.Language().Lang != lang || inst.Limits() != l || !strings.HasPrefix(inst.Name(), prefix) || inst.Isolation() != k.Isolation() {
				t.Fatalf("a new instance: healthy %v, %s, %+v, %q", inst.Healthy(), inst.Language().Lang, inst.Limits(), inst.Name())
			}
			var mu sync.Mutex
			var out strings.Builder
			if err := inst.Attach(OutputFunc(func(p []byte, stderr bool) {
				mu.Lock()
				defer mu.Unlock()
				if !stderr {
					out.Write(p)
				}
			})); err != nil {
				t.Fatal(err)
			}
			env := runtimes.EnvMap(RuntimeEnv(rt, l))
			env["GREETING"] = "there"
			if err := inst.Configure(ctx, env, "/workspace"); err != nil {
				t.Fatal(err)
			}
			// An execution's own variables are its alone: afterwards each
			// is what it was, or unset again.
			for i, c := range []struct {
				env  map[string]string
				want string
			}{
				{nil, "hi there -\n"},
				{map[string]string{"GREETING": "you", "EXTRA": "x y"}, "hi you x y\n"},
				{nil, "hi there -\n"},
			} {
				id := fmt.Sprintf("e%d", i)
				mu.Lock()
				out.Reset()
				mu.Unlock()
				if err := inst.Execute(id, code[lang], c.env, time.Now().Add(10*time.Second)); err != nil {
					t.Fatal(err)
				}
				awaitDone(t, inst, id, time.After(20*time.Second), "no done")
				inst.Drain()
				mu.Lock()
				got := out.String()
				mu.Unlock()
				if got != c.want {
					t.Errorf("execution %d with env %v: output %q, want %q", i, c.env, got, c.want)
				}
			}

			// Killed, it says why, and its sandbox goes entirely.
			ended := make(chan apitype.End, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() { ended <- inst.Monitor(stop) }()
			inst.Kill()
			select {
			case end := <-ended:
				if end.Zero() {
					t.Error("Monitor said nothing of the kill")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Monitor did not see the kill")
			}
			if inst.Healthy() {
				t.Error("a killed instance is healthy")
			}
			name := inst.Name()
			closed = true
			if err := inst.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			for _, hier := range []string{"memory", "pids"} {
				if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", hier, cfg.CgroupParent, name)); !os.IsNotExist(err) {
					t.Errorf("%s cgroup of %s left after Close: %v", hier, name, err)
				}
			}
		})
	}
}

// awaitDone waits for execution id's done on inst, failing the test with
// what if timeout fires first.
func awaitDone(t *testing.T, inst *Instance, id string, timeout <-chan time.Time, what string) runtimes.Message {
	t.Helper()
	for {
		select {
		case m, ok := <-inst.Messages():
			if !ok {
				end, err := inst.Lost()
				t.Fatalf("the runtime went away: %+v %v", end, err)
			}
			if m.ID == id && m.Type == "done" {
				return m
			}
		case <-timeout:
			t.Fatal(what)
		}
	}
}

// A gVisor sandbox runs the keeper only where it may be checkpointed: no
// network, no template, unless it is a pool image's. checked against
// mutants: a keeper always, and never.
func TestGVisorKeeperWhereKept(t *testing.T) {
	tmpl := &Root{}
	for _, tc := range []struct {
		k    GVisor
		net  bool
		want bool
	}{
		{GVisor{}, false, true},
		{GVisor{}, true, false},
		{GVisor{R: tmpl}, false, false},
		{GVisor{R: tmpl}, true, false},
		{GVisor{R: tmpl, Keep: true}, false, true},
		{GVisor{Keep: true}, true, false},
	} {
		if got := tc.k.keeper(tc.net); got != tc.want {
			t.Errorf("template %v, keep %v, network %v: keeper %v, want %v", tc.k.R != nil, tc.k.Keep, tc.net, got, tc.want)
		}
	}
}

// A Cold source writes a request's files (WithInputs) into the sandbox
// it builds for the request, while the runtime starts: they are there
// when Get returns, in that sandbox's workspace. A write that fails
// fails the Get and leaves no sandbox behind. A pool's sandboxes (New)
// never get them: one built on a request's behalf may be handed to
// another request.
func TestColdWritesInputsWhileTheRuntimeStarts(t *testing.T) {
	h, cfg := testHost(t)
	rt, err := runtimes.Lookup(cfg, "python")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Defaults
	l.Memory = 256 << 20
	slots := &Slots{}
	var wrote *workspace.Dir
	ctx := WithInputs(context.Background(), func(ws *workspace.Dir) error {
		if _, err := ws.Write("in.txt", strings.NewReader("hello"), 5, 0o644); err != nil {
			return err
		}
		wrote = ws
		return nil
	})
	inst, err := (&Cold{Kernel: Native{Host: h}, Slots: slots}).Get(ctx, rt, l, false)
	if err != nil {
		t.Fatal(err)
	}
	if wrote == nil || wrote != inst.Workspace() {
		t.Errorf("the inputs were written to %p, the instance's workspace is %p", wrote, inst.Workspace())
	}
	f, _, err := inst.Workspace().Open("in.txt")
	if err != nil {
		t.Fatalf("the input is not in the workspace: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hello" {
		t.Errorf("the input holds %q", b)
	}
	if !inst.Healthy() {
		t.Error("the instance is not healthy")
	}
	inst.Close()

	freeSlots := func() int {
		slots.mu.Lock()
		defer slots.mu.Unlock()
		return len(slots.free)
	}
	before := freeSlots()
	boom := errors.New("boom")
	failing := WithInputs(context.Background(), func(*workspace.Dir) error { return boom })
	if inst, err := (&Cold{Kernel: Native{Host: h}, Slots: slots}).Get(failing, rt, l, false); !errors.Is(err, boom) {
		if err == nil {
			inst.Close()
		}
		t.Fatalf("a failed write: Get returned %v", err)
	}
	if free := freeSlots(); free != before {
		t.Errorf("%d free id slots after a failed write, %d before: the sandbox's was not freed", free, before)
	}
	if names := liveCgroups(t, h); len(names) > 0 {
		t.Errorf("cgroups left after a failed write: %v", names)
	}

	called := false
	pooled := WithInputs(context.Background(), func(*workspace.Dir) error { called = true; return nil })
	inst, err = New(pooled, Native{Host: h}, slots, rt, l, false, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close()
	if called {
		t.Error("New (a pool's build) wrote a request's inputs")
	}
}

// liveCgroups are the sandbox cgroups under h's parent.
func liveCgroups(t *testing.T, h *jail.Host) []string {
	t.Helper()
	var names []string
	if err := h.Cgroups().Sweep("", func(name string) bool { names = append(names, name); return false }); err != nil {
		t.Fatal(err)
	}
	return names
}
