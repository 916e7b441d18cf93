// Package runtimes owns the languages airlock runs: which interpreter runs
// a language, how a program file is started, the environment each gets,
// and (for sessions) the small in-sandbox runtime programs embedded in the
// airlock binary.
//
// It must never decide anything about isolation: every runtime runs in the
// same jail with the same layers.
package runtimes

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"airlock/internal/config"
	"airlock/internal/errdefs"
)

// Runtime is one language.
type Runtime struct {
	Lang   string
	Binary string
	Ext    string
}

// Lookup returns the runtime for lang.
func Lookup(c config.Config, lang string) (Runtime, error) {
	switch lang {
	case "python", "python3", "py":
		return Runtime{Lang: "python", Binary: c.Runtimes.Python, Ext: ".py"}, nil
	case "bash", "sh", "shell":
		return Runtime{Lang: "bash", Binary: c.Runtimes.Bash, Ext: ".sh"}, nil
	case "javascript", "js", "node":
		return Runtime{Lang: "javascript", Binary: c.Runtimes.Node, Ext: ".js"}, nil
	}
	return Runtime{}, fmt.Errorf("%w: unknown language %q (want python, bash or javascript)", errdefs.ErrInvalidArgument, lang)
}

// LanguageForFile guesses the language from a file name; python if unsure.
func LanguageForFile(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".sh", ".bash":
		return "bash"
	case ".js", ".mjs", ".cjs":
		return "javascript"
	}
	return "python"
}

// Command is the argv that runs the program file at path.
func (r Runtime) Command(path string) []string {
	return []string{r.Binary, path}
}

// Env is the language's environment on top of the jail's base.
func (r Runtime) Env(l config.Limits) []string {
	threads := strconv.Itoa(int(math.Max(1, math.Ceil(l.CPUs))))
	env := []string{"OPENBLAS_NUM_THREADS=" + threads, "OMP_NUM_THREADS=" + threads}
	switch r.Lang {
	case "python":
		env = append(env, "PYTHONUNBUFFERED=1")
	case "javascript":
		env = append(env, "NODE_OPTIONS=--max-old-space-size="+strconv.FormatInt(max(int64(l.Memory)>>20*3/4, 16), 10))
	}
	return env
}

// RuntimeDir is where the embedded session runtimes live in every sandbox.
const RuntimeDir = "/opt/airlock"

// SessionCommand is the argv of the language's session runtime.
func (r Runtime) SessionCommand() []string {
	switch r.Lang {
	case "python":
		return []string{r.Binary, "-I", "-B", RuntimeDir + "/python/airlock_runtime.py"}
	case "javascript":
		return []string{r.Binary, RuntimeDir + "/javascript/runtime.js"}
	default:
		return []string{r.Binary, "--noprofile", "--norc", RuntimeDir + "/bash/runtime.sh"}
	}
}

// SessionEnv is the environment the session runtime starts with.
func (r Runtime) SessionEnv(l config.Limits) []string {
	env := r.Env(l)
	if r.Lang == "python" {
		// Figures come back as display data, with or without plt.show();
		// the path lets Python programs the session starts find the
		// backend (outside a session it behaves as plain Agg).
		env = append(env, "MPLBACKEND=module://airlock_mpl", "PYTHONPATH="+RuntimeDir+"/python")
	}
	return env
}

// Framed reports whether the runtime speaks the JSON frame protocol (bash
// speaks the NUL-terminated one).
func (r Runtime) Framed() bool { return r.Lang != "bash" }

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
