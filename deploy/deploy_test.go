package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// gateEnv turns on the deployment tests that build tools (helm from the Go
// module proxy: a minute or more the first time) or images (debootstrap
// from Debian's mirror, as root: minutes and 1.3 GB the first time). Both
// are cached afterwards, but a developer's `go test ./...` should not pay
// for them, or need the network, unasked. scripts/test.sh sets it, so CI
// runs every test here, and there a missing tool fails instead of skipping.
const gateEnv = "AIRLOCK_TEST_DEPLOY"

// kubeVersion is the Kubernetes release the chart is checked against:
// helm's capabilities and the schemas of deploy/tools/schemas.sh.
const kubeVersion = "1.37.2"

func ciMode() bool { return os.Getenv(gateEnv) == "1" }

// require skips (for a developer) or fails (in CI) when ok is false.
func require(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if ciMode() {
		t.Fatalf("%s (%s=1: nothing may be skipped)", msg, gateEnv)
	}
	t.Skipf("%s; run with %s=1 (scripts/test.sh sets it)", msg, gateEnv)
}

// repoRoot is the repository's top directory (tests run in deploy/).
func repoRoot(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func cacheDir() string {
	if d := os.Getenv("AIRLOCK_DEPLOY_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "airlock-deploy")
}

var (
	toolsOnce sync.Once
	toolsBin  string
	toolsErr  error
)

// tools builds (or finds up to date in Go's build cache) helm,
// kubeconform, ociimage, k8sschemas and yaml2json, and returns their
// directory.
func tools(t *testing.T) string {
	t.Helper()
	if !ciMode() {
		_, err := os.Stat(filepath.Join(cacheDir(), "bin", "helm"))
		require(t, err == nil, "needs helm and kubeconform, built by deploy/tools/install.sh from the Go module proxy (a minute or more the first time)")
	}
	toolsOnce.Do(func() {
		out, err := run(repoRoot(t), nil, "deploy/tools/install.sh")
		if err != nil {
			toolsErr = fmt.Errorf("deploy/tools/install.sh: %v\n%s", err, out)
			return
		}
		toolsBin = lastLine(out)
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsBin
}

var (
	schemasOnce sync.Once
	schemasDir  string
	schemasErr  error
)

// schemas generates (once per version and generator) the JSON schemas
// kubeconform checks against, from the k8s.io/kubernetes module.
func schemas(t *testing.T) string {
	t.Helper()
	tools(t)
	schemasOnce.Do(func() {
		out, err := run(repoRoot(t), []string{"K8S_VERSION=" + kubeVersion}, "deploy/tools/schemas.sh")
		if err != nil {
			schemasErr = fmt.Errorf("deploy/tools/schemas.sh: %v\n%s", err, out)
			return
		}
		schemasDir = lastLine(out)
	})
	if schemasErr != nil {
		t.Fatal(schemasErr)
	}
	return schemasDir
}

// run runs a command in dir and returns its combined output.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

const chartDir = "deploy/helm/airlock"

// helm runs the built helm in the repository's top directory; stdout and
// stderr are returned apart (rendered YAML, then warnings and errors).
func helm(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(tools(t), "helm"), args...)
	cmd.Dir = repoRoot(t)
	// No user's helm configuration, repositories or plugins.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// render is `helm template` of the chart as release "airlock" in namespace
// ns; it fails the test when helm does.
func render(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, errOut, err := helm(t, append([]string{"template", "airlock", chartDir, "--namespace", ns,
		"--kube-version", kubeVersion}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, errOut)
	}
	return out
}

// kubeconform checks manifests strictly against the generated schemas;
// it returns its output and whether every resource was valid.
func kubeconform(t *testing.T, manifests string) (string, bool) {
	t.Helper()
	cmd := exec.Command(filepath.Join(tools(t), "kubeconform"), "-strict", "-summary",
		"-kubernetes-version", kubeVersion, "-schema-location", schemas(t), "-")
	cmd.Stdin = strings.NewReader(manifests)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("kubeconform: %v", err)
		}
	}
	return string(out), err == nil
}

// object is one rendered Kubernetes object.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) name() string { s, _ := get(o, "metadata", "name").(string); return s }

// objects decodes rendered manifests (through yaml2json, so that airlock's
// module needs no YAML library).
func objects(t *testing.T, manifests string) []object {
	t.Helper()
	cmd := exec.Command(filepath.Join(tools(t), "yaml2json"))
	cmd.Stdin = strings.NewReader(manifests)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("yaml2json: %v", err)
	}
	var objs []object
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var o object
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// find returns the one object of kind and name.
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
	return nil
}

// get walks maps by key and slices by int index; nil when absent.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(object); isObj {
					m, ok = map[string]any(o), true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}
