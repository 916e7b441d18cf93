package runtimes

import (
	"errors"
	"slices"
	"strings"
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
			[]string{"/usr/bin/python3", "-I", "-B", "/opt/airlock/python/airlock_runtime.py"},
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
			if !rt.Adapts(l, config.DefaultMaxLimits()) {
				t.Errorf("%s: limits do not adapt in place", name)
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
