// Package runtimes owns the languages airlock runs, as one table of
// descriptors: which interpreter runs a language, its names and file
// extensions, how a program file is started, the environment each gets,
// which protocol its session runtime speaks, whether the template
// interpreter can start it, what its code may contain, and how its limits
// adapt; and (for sessions) the small in-sandbox runtime programs embedded
// in the airlock binary and their wire protocol. Everything that differs
// between languages is a field here, never a comparison with a language's
// name elsewhere.
//
// It must never decide anything about isolation: every runtime runs in the
// same jail with the same layers.
package runtimes

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// RuntimeDir is where the embedded session runtimes live in every sandbox.
const RuntimeDir = "/opt/airlock"

// Language describes one language.
type Language struct {
	// Lang is the canonical name; Aliases are the other names clients
	// may use.
	Lang    string
	Aliases []string
	// Ext is the extension of a program file airlock names itself
	// (main.py); Exts are every extension that selects the language.
	Ext  string
	Exts []string
	// binary picks the interpreter from the configuration.
	binary func(config.Runtimes) string
	// Framed: the session runtime speaks the JSON frame protocol
	// (docs/runtime-protocol.md); otherwise it reads NUL-terminated code
	// and answers with a status (bash).
	Framed bool
	// Template: the template interpreter can fork this language's
	// session runtime, with its libraries already imported.
	Template bool
	// sessionArgs follow the binary in the session runtime's argv,
	// templateArgs in the template interpreter's.
	sessionArgs, templateArgs []string
	// NULInCode: code may contain NUL bytes (the NUL-terminated protocol
	// cannot carry them).
	NULInCode bool
	// ReportsInterrupt: the runtime reports an interrupted execution as
	// an error itself (KeyboardInterrupt); for the others the server adds
	// that error.
	ReportsInterrupt bool
	// RepeatsSIGINT: the server repeats an interrupt's SIGINT until the
	// execution ends, as a single one can be lost, and the runtime takes
	// the repeats as one. Bash's: a SIGINT that lands in a command's
	// child between its fork and its exec is taken by the child's copy of
	// the runtime's trap, the program it then runs never sees it, and
	// bash waits for that program before it runs its own trap. Not for
	// runtimes that take each SIGINT as an interrupt of its own (Python's
	// raises KeyboardInterrupt again, in the user's handler of the first;
	// JavaScript's counts them against the interrupt messages).
	RepeatsSIGINT bool
	// PackageManager installs packages into the language's sessions and
	// runs (package packages); "" for none.
	PackageManager string
	// FreshEnvPrefix: a program given a variable with this prefix, which
	// only a new interpreter reads, runs in a new interpreter instead of
	// the pooled one.
	FreshEnvPrefix string
	// env is the language's environment for a sandbox with limits l,
	// added to the jail's base.
	env func(l config.Limits) []string
	// sessionEnv is added for the session runtime.
	sessionEnv []string
	// AdaptInPlace reports whether a runtime started with limits from can
	// serve a session with limits to once its sandbox is adapted; nil:
	// every limit adapts in place.
	AdaptInPlace func(from, to config.Limits) bool
	// Lean reports whether code, run as a one-shot, needs none of the
	// template interpreter's preloaded modules and cannot tell whether
	// they were loaded, so that a runtime forked from a template that
	// preloaded nothing serves it as the full one would, only faster
	// (lean.go); false when unsure. A speed hint only. nil: never.
	Lean func(code string) bool
	// LeanProgram reports whether a program file's code is lean (Lean)
	// and needs nothing that leanProgramArgs leave out (it can still see
	// them in its own command line: sys.orig_argv, /proc/self/cmdline).
	// A speed hint only. nil: never.
	LeanProgram func(code string) bool
	// leanProgramArgs follow the binary in the argv of a session runtime
	// started for one program run alone (cold, not forked from a
	// template) whose code LeanProgram accepts: they leave out start-up
	// work such code cannot see (Python's site: its .pth files and
	// sitecustomize), and the runtime gives the program what it can see
	// of it (program.py's _what_site_gives).
	leanProgramArgs []string
	// heap is the size of the heap the interpreter gives itself in a
	// sandbox with limits l and aborts (SIGABRT) when it is full, before
	// the sandbox's memory limit is reached (V8); nil: the interpreter
	// has no limit of its own, only the sandbox's.
	heap func(l config.Limits) int64
}

// languages is the table.
var languages = []*Language{
	{
		Lang: "python", Aliases: []string{"python3", "py"}, Ext: ".py", Exts: []string{".py"},
		binary:      func(r config.Runtimes) string { return r.Python },
		Framed:      true,
		Template:    true,
		sessionArgs: []string{"-I", "-B", RuntimeDir + "/python/airlock_runtime"},
		// The template interpreter is Python too: the same runtime
		// package, forked into sandboxes with its imports done.
		templateArgs:     []string{"-I", "-B", RuntimeDir + "/python/airlock_zygote.py"},
		NULInCode:        true,
		ReportsInterrupt: true,
		PackageManager:   "pip",
		FreshEnvPrefix:   "PYTHON",
		env:              func(config.Limits) []string { return []string{"PYTHONUNBUFFERED=1"} },
		// Figures come back as display data, with or without plt.show();
		// the path lets Python programs the session starts find the
		// backend (outside a session it behaves as plain Agg).
		sessionEnv: []string{"MPLBACKEND=module://airlock_mpl", "PYTHONPATH=" + RuntimeDir + "/python"},
		Lean:       pythonLean,
		// A bare `python3 p.py` spends about half its start in site on a
		// Debian host with matplotlib and setuptools (their .pth files).
		LeanProgram:     pythonLeanProgram,
		leanProgramArgs: []string{"-I", "-S", "-B", RuntimeDir + "/python/airlock_runtime/__main__.py"},
	},
	{
		Lang: "bash", Aliases: []string{"sh", "shell"}, Ext: ".sh", Exts: []string{".sh", ".bash"},
		binary:        func(r config.Runtimes) string { return r.Bash },
		sessionArgs:   []string{"--noprofile", "--norc", RuntimeDir + "/bash/runtime.sh"},
		env:           func(config.Limits) []string { return nil },
		RepeatsSIGINT: true,
	},
	{
		Lang: "javascript", Aliases: []string{"js", "node"}, Ext: ".js", Exts: []string{".js", ".mjs", ".cjs"},
		binary:           func(r config.Runtimes) string { return r.Node },
		Framed:           true,
		sessionArgs:      []string{RuntimeDir + "/javascript/runtime.js"},
		NULInCode:        true,
		ReportsInterrupt: true,
		PackageManager:   "npm",
		env: func(l config.Limits) []string {
			return []string{"NODE_OPTIONS=--max-old-space-size=" + strconv.FormatInt(v8Heap(l)>>20, 10)}
		},
		// V8 sizes its heap once, at start: a pooled runtime serves only
		// sessions whose memory gives the heap it has. (One sized from the
		// server's maximum instead, left to the cgroup, does not collect
		// garbage until it is killed: V8's heuristics follow its limit.)
		AdaptInPlace: func(from, to config.Limits) bool { return v8Heap(from) == v8Heap(to) },
		heap:         v8Heap,
	},
}

// v8Heap is the size of V8's old space in a sandbox with limits l: its
// memory less room for node itself, buffers and the sandbox's files (a
// quarter of it, at most 256 MiB), in whole MiB, at least 16 MiB.
func v8Heap(l config.Limits) int64 {
	m := int64(l.Memory)
	return max(m-min(m/4, 256<<20), 16<<20) >> 20 << 20
}

// Names lists the canonical names of every language.
func Names() []string {
	out := make([]string, len(languages))
	for i, l := range languages {
		out[i] = l.Lang
	}
	return out
}

// find returns the language called name (or an alias of it).
func find(name string) *Language {
	for _, l := range languages {
		if l.Lang == name || slices.Contains(l.Aliases, name) {
			return l
		}
	}
	return nil
}

// Runtime is a language with its interpreter as configured.
type Runtime struct {
	*Language
	Binary string
}

// Lookup returns the runtime for lang.
func Lookup(c config.Config, lang string) (Runtime, error) {
	l := find(lang)
	if l == nil {
		return Runtime{}, fmt.Errorf("%w: unknown language %q (want %s)", errdefs.ErrInvalidArgument, lang, wanted())
	}
	return Runtime{Language: l, Binary: l.binary(c.Runtimes)}, nil
}

// WithManager is the language whose package manager is manager ("" if
// none).
func WithManager(manager string) string { return ManagerLanguages()[manager] }

// ManagerLanguages maps each package manager to the language whose
// sessions it installs into.
func ManagerLanguages() map[string]string {
	out := map[string]string{}
	for _, l := range languages {
		if l.PackageManager != "" {
			out[l.PackageManager] = l.Lang
		}
	}
	return out
}

// Managed lists the languages that have a package manager, with it, for
// messages: "python (pip) and javascript (npm)".
func Managed() string {
	var out []string
	for _, l := range languages {
		if l.PackageManager != "" {
			out = append(out, l.Lang+" ("+l.PackageManager+")")
		}
	}
	return strings.Join(out, " and ")
}

// wanted lists the canonical names for messages: "a, b or c".
func wanted() string {
	n := Names()
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// Templates returns the runtimes the template interpreter starts.
func Templates(c config.Config) []Runtime {
	var out []Runtime
	for _, l := range languages {
		if l.Template {
			out = append(out, Runtime{Language: l, Binary: l.binary(c.Runtimes)})
		}
	}
	return out
}

// LanguageForFile guesses the language from a file name; the first
// language of the table (python) if unsure.
func LanguageForFile(name string) string {
	ext := strings.ToLower(filepath.Ext(name))
	for _, l := range languages {
		if slices.Contains(l.Exts, ext) {
			return l.Lang
		}
	}
	return languages[0].Lang
}

// Command is the argv that runs the program file at path.
func (r Runtime) Command(path string) []string {
	return []string{r.Binary, path}
}

// Env is the language's environment on top of the jail's base.
func (r Runtime) Env(l config.Limits) []string {
	threads := strconv.Itoa(int(math.Max(1, math.Ceil(l.CPUs))))
	env := []string{"OPENBLAS_NUM_THREADS=" + threads, "OMP_NUM_THREADS=" + threads}
	return append(env, r.env(l)...)
}

// SessionCommand is the argv of the language's session runtime.
func (r Runtime) SessionCommand() []string {
	return append([]string{r.Binary}, r.sessionArgs...)
}

// LeanProgramCommand is the argv of the session runtime started for one
// program run whose code LeanProgram accepts; nil if the language has none.
func (r Runtime) LeanProgramCommand() []string {
	if r.leanProgramArgs == nil {
		return nil
	}
	return append([]string{r.Binary}, r.leanProgramArgs...)
}

// TemplateCommand is the argv of the template interpreter (Template
// languages only).
func (r Runtime) TemplateCommand() []string {
	return append([]string{r.Binary}, r.templateArgs...)
}

// SessionEnv is the environment the session runtime starts with.
func (r Runtime) SessionEnv(l config.Limits) []string {
	return append(r.Env(l), r.sessionEnv...)
}

// Adapts reports whether a runtime started with limits from can serve
// limits to.
func (r Runtime) Adapts(from, to config.Limits) bool {
	return r.AdaptInPlace == nil || r.AdaptInPlace(from, to)
}

// OutOfMemory reports whether a runtime that ended with status, in a
// sandbox with limits l whose memory use peaked at peak bytes, ran out of
// memory though the kernel's OOM killer did not act: an interpreter that
// gives itself a heap sized from l (V8) aborts when it is full. Only what
// airlock measured counts, never what the sandbox printed (anyone can
// print V8's message): the abort, and a peak that reached most of the
// heap, which V8 gives up only near its end.
func (r Runtime) OutOfMemory(l config.Limits, status syscall.WaitStatus, peak int64) bool {
	if r.heap == nil || !status.Signaled() || status.Signal() != syscall.SIGABRT {
		return false
	}
	return peak >= r.heap(l)/4*3
}

// EnvMap turns K=V pairs into a map; a later pair wins.
func EnvMap(kvs []string) map[string]string {
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// ValidEnv checks a K=V environment entry from a client.
func ValidEnv(kv string) error {
	k, _, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%w: %q: want K=V", errdefs.ErrInvalidArgument, kv)
	}
	return ValidEnvName(k, kv)
}

// ValidEnvName checks an environment variable name.
func ValidEnvName(k, shown string) error {
	if k == "" || len(k) > 256 {
		return fmt.Errorf("%w: %q: bad variable name", errdefs.ErrInvalidArgument, shown)
	}
	for i, r := range k {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return fmt.Errorf("%w: %q: variable names are letters, digits and _", errdefs.ErrInvalidArgument, shown)
		}
	}
	if strings.ContainsRune(shown, 0) {
		return fmt.Errorf("%w: environment values must not contain NUL", errdefs.ErrInvalidArgument)
	}
	return nil
}
