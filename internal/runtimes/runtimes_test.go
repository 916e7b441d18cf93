package runtimes

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// The table is the one place languages differ: these pin what each
// descriptor gives the rest of airlock.
func TestLanguageTable(t *testing.T) {
	cfg := config.Default()
	l := config.DefaultLimits()
	for _, c := range []struct {
		names        []string
		lang, binary string
		ext          string
		session      []string
		env          string // one entry of Env, besides the thread counts
		sessionEnv   string // one entry SessionEnv adds
		framed, tmpl bool
		nul          bool
		fresh        string
	}{
		{[]string{"python", "python3", "py"}, "python", "/usr/bin/python3", ".py",
			[]string{"/usr/bin/python3", "-I", "-B", "/opt/airlock/python/airlock_runtime"},
			"PYTHONUNBUFFERED=1", "MPLBACKEND=module://airlock_mpl", true, true, true, "PYTHON"},
		{[]string{"bash", "sh", "shell"}, "bash", "/usr/bin/bash", ".sh",
			[]string{"/usr/bin/bash", "--noprofile", "--norc", "/opt/airlock/bash/runtime.sh"},
			"", "", false, false, false, ""},
		{[]string{"javascript", "js", "node"}, "javascript", "/usr/bin/node", ".js",
			[]string{"/usr/bin/node", "/opt/airlock/javascript/runtime.js"},
			"NODE_OPTIONS=--max-old-space-size=384", "", true, false, true, ""},
	} {
		for _, name := range c.names {
			rt, err := Lookup(cfg, name)
			if err != nil {
				t.Fatalf("Lookup(%q): %v", name, err)
			}
			if rt.Lang != c.lang || rt.Binary != c.binary || rt.Ext != c.ext || rt.Framed != c.framed ||
				rt.Template != c.tmpl || rt.NULInCode != c.nul || rt.FreshEnvPrefix != c.fresh {
				t.Errorf("Lookup(%q) = %+v", name, rt)
			}
			if got := rt.SessionCommand(); !slices.Equal(got, c.session) {
				t.Errorf("%s: SessionCommand = %q, want %q", name, got, c.session)
			}
			if got := rt.Command("/workspace/p" + c.ext); !slices.Equal(got, []string{c.binary, "/workspace/p" + c.ext}) {
				t.Errorf("%s: Command = %q", name, got)
			}
			env := rt.Env(l)
			if !slices.Contains(env, "OMP_NUM_THREADS=1") || (c.env != "" && !slices.Contains(env, c.env)) {
				t.Errorf("%s: Env = %q, want %q in it", name, env, c.env)
			}
			senv := rt.SessionEnv(l)
			if !slices.Equal(senv[:len(env)], env) || (c.sessionEnv != "" && !slices.Contains(senv, c.sessionEnv)) {
				t.Errorf("%s: SessionEnv = %q", name, senv)
			}
			if want := c.lang != "javascript"; rt.Adapts(l, config.DefaultMaxLimits()) != want {
				t.Errorf("%s: limits adapt in place: %v, want %v", name, !want, want)
			}
		}
	}
	if _, err := Lookup(cfg, "ruby"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "python, bash or javascript") {
		t.Errorf("Lookup(ruby) = %v", err)
	}
	tmpl := Templates(cfg)
	if len(tmpl) != 1 || tmpl[0].Lang != "python" ||
		!slices.Equal(tmpl[0].TemplateCommand(), []string{"/usr/bin/python3", "-I", "-B", "/opt/airlock/python/airlock_zygote.py"}) {
		t.Errorf("Templates = %+v", tmpl)
	}
}

// config knows the languages' names (to check pool.size) without importing
// this package: the two lists must agree.
func TestNamesMatchConfig(t *testing.T) {
	if !slices.Equal(Names(), config.Languages) {
		t.Errorf("runtimes has %q, config.Languages %q", Names(), config.Languages)
	}
}

func TestLanguageForFile(t *testing.T) {
	for name, want := range map[string]string{
		"a.py": "python", "a.sh": "bash", "x/b.BASH": "bash", "c.js": "javascript", "c.mjs": "javascript",
		"c.cjs": "javascript", "README": "python", "-": "python", "a.rb": "python",
	} {
		if got := LanguageForFile(name); got != want {
			t.Errorf("LanguageForFile(%q) = %q, want %q", name, got, want)
		}
	}
}

// V8 sizes its heap from the sandbox's memory once, at start: pooled
// runtimes serve only sessions that would give them the same heap, and
// V8's abort when the heap is full counts as running out of memory only
// when airlock saw the memory used.
func TestJavaScriptHeap(t *testing.T) {
	const mib = 1 << 20
	js, err := Lookup(config.Default(), "javascript")
	if err != nil {
		t.Fatal(err)
	}
	py, _ := Lookup(config.Default(), "python")
	mem := func(n int64) config.Limits { l := config.DefaultLimits(); l.Memory = config.Size(n); return l }
	for memory, heap := range map[int64]int64{
		16 * mib: 16 * mib, 20 * mib: 16 * mib, 64 * mib: 48 * mib, 512 * mib: 384 * mib, 513 * mib: 384 * mib,
		1 << 30: 768 * mib, 2 << 30: 1792 * mib, 8 << 30: 7936 * mib,
	} {
		if got := v8Heap(mem(memory)); got != heap {
			t.Errorf("heap for %d MiB: %d MiB, want %d", memory/mib, got/mib, heap/mib)
		}
		want := "NODE_OPTIONS=--max-old-space-size=" + strconv.FormatInt(heap/mib, 10)
		if env := js.Env(mem(memory)); !slices.Contains(env, want) {
			t.Errorf("Env for %d MiB = %q, want %q in it", memory/mib, env, want)
		}
	}
	def := config.DefaultLimits()
	cpus := def
	cpus.CPUs *= 2
	for _, c := range []struct {
		to   config.Limits
		want bool
	}{{def, true}, {cpus, true}, {mem(513 * mib), true}, {mem(2 << 30), false}, {mem(256 * mib), false}} {
		if got := js.Adapts(def, c.to); got != c.want {
			t.Errorf("javascript adapts from %d MiB to %d MiB: %v", def.Memory/mib, c.to.Memory/mib, got)
		}
		if !py.Adapts(def, c.to) {
			t.Errorf("python does not adapt to %+v", c.to)
		}
	}
	abort, kill, exit134 := syscall.WaitStatus(syscall.SIGABRT), syscall.WaitStatus(syscall.SIGKILL), syscall.WaitStatus(134<<8)
	for _, c := range []struct {
		rt     Runtime
		status syscall.WaitStatus
		peak   int64
		want   bool
	}{
		{js, abort, 300 * mib, true}, // 3/4 of the 384 MiB heap is 288
		{js, abort, 280 * mib, false},
		{js, abort, 0, false},
		{js, kill, 500 * mib, false},
		{js, exit134, 500 * mib, false},
		{py, abort, 500 * mib, false},
	} {
		if got := c.rt.OutOfMemory(def, c.status, c.peak); got != c.want {
			t.Errorf("%s: OutOfMemory(%v, %d MiB) = %v", c.rt.Lang, c.status, c.peak/mib, got)
		}
	}
}

// Every runtime's files are shipped, the Python package whole (its
// __init__.py and __main__.py too, which a directory pattern would leave
// out), and its tests are not.
func TestRootFiles(t *testing.T) {
	files := RootFiles()
	want := []string{"bash/runtime.sh", "python/airlock_zygote.py", "python/airlock_mpl.py"}
	for _, name := range []string{"runtime", "session", "program", "execution", "interrupts", "transform", "globals",
		"tracebacks", "display", "wire", "current", "primordials"} {
		want = append(want, "javascript/"+name+".js")
	}
	want = append(want, "javascript/acorn/acorn.js", "javascript/acorn/LICENSE")
	for _, name := range []string{"__init__", "__main__", "wire", "current", "display", "tracebacks", "syntax", "compilerop", "program", "session",
		"magics/__init__", "magics/magic", "magics/osm", "magics/execution", "magics/namespace", "magics/packaging",
		"magics/script", "magics/display", "magics/basic"} {
		want = append(want, "python/airlock_runtime/"+name+".py")
	}
	for _, name := range want {
		if files[RuntimeDir+"/"+name] == "" {
			t.Errorf("%s is not shipped", name)
		}
	}
	for p := range files {
		if strings.Contains(p, "/tests/") || strings.Contains(p, "__pycache__") || strings.HasSuffix(p, "/VENDORED") {
			t.Errorf("%s is shipped", p)
		}
	}
}

// The acorn the JavaScript runtime ships is the release its record names,
// unmodified, with its licence.
func TestVendoredAcorn(t *testing.T) {
	record, err := os.ReadFile("javascript/acorn/VENDORED")
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+(\S+)`).FindSubmatch(record)
		if m == nil {
			t.Fatalf("VENDORED has no %s", name)
		}
		return string(m[1])
	}
	files := RootFiles()
	src := files[RuntimeDir+"/javascript/acorn/acorn.js"]
	if sum := fmt.Sprintf("%x", sha256.Sum256([]byte(src))); sum != field("sha256") {
		t.Errorf("shipped acorn.js has sha256 %s, VENDORED records %s", sum, field("sha256"))
	}
	if want := `var version = "` + field("version") + `";`; !strings.Contains(src, want) {
		t.Errorf("shipped acorn.js is not version %s", field("version"))
	}
	if lic := files[RuntimeDir+"/javascript/acorn/LICENSE"]; !strings.HasPrefix(lic, "MIT License") {
		t.Errorf("acorn's licence is not shipped with it: %.40q", lic)
	}
}
