package runtimes

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// compileScript compiles the sources it reads on stdin (path -> text)
// into unchecked hash-based .pyc images (PEP 552: loaded without a look
// at the source, which in a sandbox's root never changes) and writes them
// to stdout with the interpreter's cache tag. It touches no file.
const compileScript = `import base64, importlib.util, json, marshal, sys
out = {"tag": sys.implementation.cache_tag, "files": {}}
for path, text in json.load(sys.stdin).items():
    data = text.encode()
    code = compile(data, path, "exec", dont_inherit=True)
    pyc = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(data) + marshal.dumps(code)
    out["files"][path] = base64.b64encode(pyc).decode()
json.dump(out, sys.stdout)
`

// cacheTag is what an interpreter's bytecode files are named after
// (sys.implementation.cache_tag).
var cacheTag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]+-[0-9]{2,4}$`) })

// Precompile is how the host's root template gets the Python runtime's
// bytecode for python (the host's interpreter, which sandboxes run):
// prepare compiles it into a new template, whose name key (python's
// path, size and time) changes when python does. A cold runtime then
// loads its modules instead of compiling them at each start, about 10 ms
// of it. The compiler runs as nobody, with the standard library alone,
// reads the sources on stdin, writes the images to stdout and touches no
// file; airlock names and writes the files itself, beside the sources
// they were made from. Without python, key is "" and prepare nil.
func Precompile(python string) (key string, prepare func(root string) error) {
	st, err := os.Stat(python)
	if err != nil {
		return "", nil
	}
	key = fmt.Sprintf("python-bytecode-v1 %q %d %d", python, st.Size(), st.ModTime().UnixNano())
	return key, func(root string) error {
		sources := map[string]string{}
		for p, text := range RootFiles() {
			if strings.HasPrefix(p, RuntimeDir+"/python/") && strings.HasSuffix(p, ".py") {
				sources[p] = text
			}
		}
		files, err := compile(python, sources)
		if err != nil {
			return err
		}
		for p, pyc := range files {
			dst := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, []byte(pyc), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// compile compiles sources with python, as nobody and within a minute,
// and returns the bytecode files named beside them
// (dir/__pycache__/name.<tag>.pyc).
func compile(python string, sources map[string]string) (map[string]string, error) {
	in, err := json.Marshal(sources)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-I", "-S", "-B", "-c", compileScript)
	cmd.Env, cmd.Dir = []string{}, "/"
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{w: &stdout, n: 64 << 20}, &limited{w: &stderr, n: 4 << 10}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}}
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("compiling the Python runtime with %s: %v: %s", python, err, strings.TrimSpace(stderr.String()))
	}
	var got struct {
		Tag   string            `json:"tag"`
		Files map[string]string `json:"files"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		return nil, fmt.Errorf("compiling the Python runtime with %s: %v", python, err)
	}
	if !cacheTag().MatchString(got.Tag) {
		return nil, fmt.Errorf("compiling the Python runtime with %s: cache tag %q", python, got.Tag)
	}
	out := map[string]string{}
	for p, b64 := range got.Files {
		if _, ok := sources[p]; !ok {
			return nil, fmt.Errorf("compiling the Python runtime with %s: %q is not one of its sources", python, p)
		}
		pyc, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pyc) < 16 {
			return nil, fmt.Errorf("compiling the Python runtime with %s: the image of %s is not one", python, p)
		}
		dir, name := path.Split(p)
		out[dir+"__pycache__/"+strings.TrimSuffix(name, ".py")+"."+got.Tag+".pyc"] = string(pyc)
	}
	return out, nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
