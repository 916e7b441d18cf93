package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pendingKeys are configuration keys the chart sets that airlock does not
// know yet (its config rejects unknown keys): the image test would run
// the chart's configuration without them. Empty: airlock knows every key
// the chart sets (TestChartConfigIsAirlocks checks each profile), so the
// image's server runs as a pod's does, its name and token from files.
var pendingKeys [][]string

// The image test's own cgroup parent and host ids, apart from every other
// test's (e2e servers use ids from 1.5e9 up).
const (
	imageCgroupParent = "airlock-image-test"
	imageIDBase       = 1_300_000_000
)

// TestImage builds the image with deploy/image/build.sh, unpacks the
// archive, and starts its root file system in a jail of its own on this
// host (deploy/image/run-rootfs.sh: namespaces, pivot_root, read-only root,
// the chart's mounts): `airlock doctor`, `airlock run` of the demo program,
// and the demo's session over HTTP must all work from what the image holds.
func TestImage(t *testing.T) {
	if !ciMode() {
		t.Skipf("builds the container image: debootstrap of Debian 12 as root from Debian's mirror (about 2 minutes and 1.3 GB the first time, then cached in %s) and an OCI archive; it runs when %s=1, which scripts/test.sh (CI) sets", cacheDir(), gateEnv)
	}
	require(t, os.Geteuid() == 0, "the image build and its jail need root")
	for _, c := range []string{"debootstrap", "unshare", "chroot"} {
		require(t, lookPath(c) != "", "the image build needs %s (scripts/install-deps.sh installs it)", c)
	}
	bin := tools(t)
	root := repoRoot(t)
	dir := t.TempDir()
	archive := filepath.Join(dir, "airlock.tar")

	start := time.Now()
	out, err := run(root, nil, "deploy/image/build.sh", "-o", archive, "-t", "registry.example.com/airlock:test")
	if err != nil {
		t.Fatalf("deploy/image/build.sh: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^image .*$`).FindString(out)
	t.Logf("built in %v: %s", time.Since(start).Round(time.Second), m)
	if lastLine(out) != archive {
		t.Fatalf("build.sh printed %q last, want the archive's path", lastLine(out))
	}
	checkImageConfig(t, archive, filepath.Join(root, "deploy/image/Dockerfile"), "registry.example.com/airlock:test")

	rootfs := filepath.Join(dir, "root")
	if out, err := run(root, nil, filepath.Join(bin, "ociimage"), "unpack", "-image", archive, "-dir", rootfs); err != nil {
		t.Fatalf("ociimage unpack: %v\n%s", err, out)
	}
	// Unpacked, never built here: nothing of the build's root is reused.
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/airlock")); err != nil {
		t.Fatal(err)
	}

	// What the chart mounts: its configuration, the pod's name, the token.
	cfgDir, podDir, secretDir := filepath.Join(dir, "config"), filepath.Join(dir, "pod"), filepath.Join(dir, "secret")
	for _, d := range []string{cfgDir, podDir, secretDir} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(podDir, "name"), []byte("airlock-0"), 0o644)
	os.WriteFile(filepath.Join(secretDir, "token"), []byte("test-token"), 0o400)
	cfg := chartConfig(t)
	port := freePort(t, "tcp")
	merge(cfg, map[string]any{
		"cgroup_parent": imageCgroupParent,
		"id_base":       imageIDBase,
		"server":        map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", port)},
		"pool":          map[string]any{"size": map[string]any{"python": 2, "bash": 1, "javascript": 1}},
		// As ci/persistence-values.yaml: paused sessions in data_dir,
		// below a volume's root kubelet (or its provisioner) made 0777.
		"persistence": map[string]any{"enabled": true},
	})
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkImageLeftovers(t, rootfs) })
	// The emptyDirs are 0777, as kubelet makes them: the chart's init
	// container narrows them first.
	jail := func(extra ...string) []string {
		args := []string{"deploy/image/run-rootfs.sh", "-i", chartInit(t),
			"-v", cfgDir + ":/etc/airlock/config", "-v", podDir + ":/etc/airlock/pod", "-v", secretDir + ":/etc/airlock/secret"}
		return append(append(args, extra...), rootfs)
	}
	const conf = "/etc/airlock/config/config.json"

	// Nothing else means anything when doctor finds the image lacking.
	if !t.Run("doctor", func(t *testing.T) {
		out, err := run(root, nil, "sh", append(jail(), "airlock", "doctor", "--config", conf)...)
		if err != nil {
			t.Fatalf("airlock doctor in the image: %v\n%s", err, out)
		}
		for _, want := range []string{
			"ok    jail ", "ok    python ", "ok    python packages   numpy", "sklearn",
			"ok    bash ", "ok    node ", "airlock can run code on this host with every configured protection",
			"ok    cluster           server airlock-0: session ids are airlock-0.<boot epoch>.<random>",
			"ok    persistence       paused sessions in /var/lib/airlock/sessions",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor's report lacks %q:\n%s", want, out)
			}
		}
		t.Logf("airlock doctor in the image:\n%s", out)
	}) {
		return
	}

	t.Run("run", func(t *testing.T) {
		out, err := run(root, nil, "sh", append(jail("-v", filepath.Join(root, "examples")+":/examples"),
			"airlock", "run", "--json", "--config", conf, "/examples/demo.py")...)
		var r struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
			Files    []struct{ Path string }
		}
		if err != nil || json.Unmarshal([]byte(lastLine(out)), &r) != nil || r.ExitCode != 0 ||
			!strings.Contains(r.Stdout, "slope=") || len(r.Files) != 1 || r.Files[0].Path != "fit.png" {
			t.Fatalf("airlock run examples/demo.py in the image: %v\n%s", err, out)
		}
	})

	t.Run("session", func(t *testing.T) {
		srv := startImageServer(t, root, jail(), conf, port)
		imageDemo(t, srv)
		srv.stop(t)
	})
}

// TestImagePackages: the image holds every package airlock's sandboxes
// need on a host (scripts/install-deps.sh), so that adding one there and
// not here fails at once, without building anything.
func TestImagePackages(t *testing.T) {
	root := repoRoot(t)
	deps, err := os.ReadFile(filepath.Join(root, "scripts/install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\npkgs="([^"]*)"`).FindSubmatch(deps)
	if m == nil {
		t.Fatal(`scripts/install-deps.sh: no pkgs="..." list`)
	}
	list, err := os.ReadFile(filepath.Join(root, "deploy/image/packages.txt"))
	if err != nil {
		t.Fatal(err)
	}
	image := map[string]bool{}
	for _, l := range strings.Split(string(list), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			image[l] = true
		}
	}
	// What only the host's tests and benchmark use.
	hostOnly := map[string]bool{"bubblewrap": true, "curl": true}
	for _, p := range strings.Fields(string(m[1])) {
		if !hostOnly[p] && !image[p] {
			t.Errorf("scripts/install-deps.sh installs %s, deploy/image/packages.txt does not", p)
		}
	}
	if !image["nginx"] {
		t.Error("the image lacks nginx, which the chart's router runs")
	}
	df, _ := os.ReadFile(filepath.Join(root, "deploy/image/Dockerfile"))
	if !strings.Contains(string(df), "COPY deploy/image/packages.txt") {
		t.Error("the Dockerfile does not install deploy/image/packages.txt")
	}
}

// TestDockerfileSources: the Dockerfile's build stage copies go.mod,
// go.sum, cmd/, internal/ and scripts/build.sh only; the binary must need
// nothing else of the repository (Docker is not run in CI, so this is
// checked here). Both image builds build airlock with scripts/build.sh,
// so the image's sandboxes start from the small embedded init, never a
// plain go build's re-executed airlock. checked against a mutant: with
// the Dockerfile's plain go build back, the test failed.
func TestDockerfileSources(t *testing.T) {
	root := repoRoot(t)
	df, _ := os.ReadFile(filepath.Join(root, "deploy/image/Dockerfile"))
	for _, want := range []string{"COPY go.mod go.sum ./", "COPY cmd ./cmd", "COPY internal ./internal",
		"COPY scripts/build.sh ./scripts/build.sh", "RUN VERSION=${VERSION} scripts/build.sh /out/airlock"} {
		if !strings.Contains(string(df), want) {
			t.Fatalf("the Dockerfile lacks %q", want)
		}
	}
	sh, _ := os.ReadFile(filepath.Join(root, "deploy/image/build.sh"))
	if !strings.Contains(string(sh), `"$repo/scripts/build.sh" "$work/layer2/usr/local/bin/airlock"`) {
		t.Error("deploy/image/build.sh does not build airlock with scripts/build.sh")
	}
	for name, text := range map[string][]byte{"Dockerfile": df, "build.sh": sh} {
		if regexp.MustCompile(`\bgo build\b`).Match(text) {
			t.Errorf("deploy/image/%s runs a go build of its own, not scripts/build.sh", name)
		}
	}
	out, err := run(root, nil, "go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}", "./cmd/airlock", "./cmd/airlock-init")
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		dir := strings.Fields(line)[0]
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module dependency, downloaded by go mod download
		}
		if !strings.HasPrefix(rel, "cmd/") && !strings.HasPrefix(rel, "internal/") {
			t.Errorf("cmd/airlock needs %s, which the Dockerfile does not copy", rel)
		}
		for _, f := range strings.Fields(line)[1:] {
			if strings.Contains(f, "..") {
				t.Errorf("%s embeds %s, outside its directory", rel, f)
			}
		}
	}
}

// chartConfig is the configuration the chart renders for its default
// values, without the keys airlock does not know yet.
func chartConfig(t *testing.T) map[string]any {
	t.Helper()
	objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/default-values.yaml"))
	var cfg map[string]any
	if err := json.Unmarshal([]byte(get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, k := range pendingKeys {
		m := cfg
		for _, p := range k[:len(k)-1] {
			m, _ = m[p].(map[string]any)
		}
		if _, ok := m[k[len(k)-1]]; !ok {
			t.Fatalf("the chart no longer sets %v: update pendingKeys", k)
		}
		delete(m, k[len(k)-1])
	}
	return cfg
}

// chartInit is the command of the chart's init container, words joined
// by spaces (run-rootfs.sh's -i).
func chartInit(t *testing.T) string {
	t.Helper()
	objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/default-values.yaml"))
	var words []string
	for _, w := range get(find(t, objs, "StatefulSet", "airlock"), "spec", "template", "spec", "initContainers", 0, "command").([]any) {
		words = append(words, w.(string))
	}
	return strings.Join(words, " ")
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// checkImageConfig reads the archive as a registry client would (OCI
// index, manifest, config) and compares the image's settings with the
// Dockerfile's, and Docker's manifest.json with the same.
func checkImageConfig(t *testing.T, archive, dockerfile, ref string) {
	t.Helper()
	files := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// Small JSON files only; layers are checked by ociimage unpack.
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
		}
	}
	blob := func(digest string) []byte {
		b, ok := files["blobs/"+strings.Replace(digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("the archive has no blob %s", digest)
		}
		return b
	}
	var index struct {
		Manifests []struct {
			MediaType   string
			Digest      string
			Annotations map[string]string
		}
	}
	json.Unmarshal(files["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].MediaType != "application/vnd.oci.image.manifest.v1+json" ||
		index.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct {
			MediaType string
			Digest    string
		}
	}
	json.Unmarshal(blob(index.Manifests[0].Digest), &manifest)
	if len(manifest.Layers) != 2 {
		t.Fatalf("want 2 layers (Debian, airlock), got %+v", manifest.Layers)
	}
	var config struct {
		Architecture, OS string
		Config           struct {
			Entrypoint, Cmd, Env []string
			WorkingDir           string
			ExposedPorts         map[string]struct{}
		}
	}
	json.Unmarshal(blob(manifest.Config.Digest), &config)

	want := dockerfileSettings(t, dockerfile)
	got := config.Config
	for what, c := range map[string][2]any{
		"ENTRYPOINT": {got.Entrypoint, want.entrypoint},
		"CMD":        {got.Cmd, want.cmd},
		"ENV":        {got.Env, want.env},
		"WORKDIR":    {got.WorkingDir, want.workdir},
		"EXPOSE":     {fmt.Sprint(got.ExposedPorts), fmt.Sprint(want.ports)},
		"os":         {config.OS, "linux"},
	} {
		if !reflect.DeepEqual(c[0], c[1]) {
			t.Errorf("image %s %v, the Dockerfile says %v", what, c[0], c[1])
		}
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	json.Unmarshal(files["manifest.json"], &docker)
	if len(docker) != 1 || docker[0].Config != "blobs/"+strings.Replace(manifest.Config.Digest, ":", "/", 1) ||
		!reflect.DeepEqual(docker[0].RepoTags, []string{ref}) || len(docker[0].Layers) != 2 {
		t.Errorf("manifest.json (for docker load): %s", files["manifest.json"])
	}
}

type dockerSettings struct {
	entrypoint, cmd, env []string
	workdir              string
	ports                map[string]struct{}
}

func dockerfileSettings(t *testing.T, path string) dockerSettings {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := dockerSettings{ports: map[string]struct{}{}}
	for _, line := range strings.Split(string(data), "\n") {
		instr, arg, _ := strings.Cut(line, " ")
		switch instr {
		case "ENTRYPOINT":
			json.Unmarshal([]byte(arg), &s.entrypoint)
		case "CMD":
			json.Unmarshal([]byte(arg), &s.cmd)
		case "ENV":
			s.env = append(s.env, arg)
		case "WORKDIR":
			s.workdir = arg
		case "EXPOSE":
			for _, p := range strings.Fields(arg) {
				s.ports[p] = struct{}{}
			}
		}
	}
	if s.entrypoint == nil || s.cmd == nil {
		t.Fatalf("%s: no JSON ENTRYPOINT or CMD", path)
	}
	return s
}

// imageServer is `airlock serve` as PID 1 of run-rootfs.sh's namespaces.
type imageServer struct {
	cmd  *exec.Cmd
	url  string
	log  *lockedBuffer
	done chan error
}

func startImageServer(t *testing.T, root string, jail []string, conf string, port int) *imageServer {
	t.Helper()
	s := &imageServer{log: &lockedBuffer{lines: make(chan string, 10000)}, done: make(chan error, 1)}
	s.cmd = exec.Command("sh", append(jail, "airlock", "serve", "--config", conf)...)
	s.cmd.Dir = root
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	listen := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)
	timeout := time.After(60 * time.Second)
	for s.url == "" {
		select {
		case l := <-s.log.lines:
			if m := listen.FindStringSubmatch(l); m != nil {
				s.url = "http://" + m[1]
			}
		case err := <-s.done:
			t.Fatalf("airlock serve in the image exited: %v\n%s", err, s.log)
		case <-timeout:
			t.Fatalf("airlock serve in the image did not start:\n%s", s.log)
		}
	}
	if s.url != fmt.Sprintf("http://127.0.0.1:%d", port) {
		t.Fatalf("listening on %s, configured port %d", s.url, port)
	}
	// Warm: every pool full and the Python template running.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var h struct {
			Pool map[string]json.RawMessage `json:"pool"`
		}
		if code, _ := s.do(t, "GET", "/healthz", nil, &h); code == 200 && warm(h.Pool) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools not warm after 2 minutes:\n%s", s.log)
		}
		select {
		case err := <-s.done:
			t.Fatalf("airlock serve in the image exited: %v\n%s", err, s.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func warm(pool map[string]json.RawMessage) bool {
	if len(pool) == 0 {
		return false
	}
	for k, raw := range pool {
		if k == "python_template" {
			var z struct{ Running bool }
			json.Unmarshal(raw, &z)
			if !z.Running {
				return false
			}
			continue
		}
		var q struct{ Ready, Target int }
		json.Unmarshal(raw, &q)
		if q.Ready < q.Target {
			return false
		}
	}
	return true
}

// stop sends SIGTERM to airlock itself (PID 1 of the namespace, the child
// of unshare), as the kubelet does, and waits for a clean exit.
func (s *imageServer) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", s.cmd.Process.Pid, s.cmd.Process.Pid))
	pid, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Errorf("no airlock under unshare (%q): killing the namespace", children)
		s.cmd.Process.Kill()
		<-s.done
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("airlock serve in the image: exit %v\n%s", err, s.log)
		}
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill() // --kill-child: the namespace goes
		<-s.done
		t.Errorf("airlock serve in the image did not stop on SIGTERM:\n%s", s.log)
	}
}

var imageClient = &http.Client{Timeout: 2 * time.Minute}

// do sends a request (body: nil, string or a value for JSON) and decodes
// a JSON answer into out.
func (s *imageServer) do(t *testing.T, method, path string, body any, out any) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		r = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	req.Header.Set("Authorization", "Bearer test-token") // the Secret's, through server.token_file
	resp, err := imageClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %.300q: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, data
}

type imageResult struct {
	Stdout  string `json:"stdout"`
	Results []struct {
		Data map[string]json.RawMessage `json:"data"`
	} `json:"results"`
	Error *struct {
		Name string `json:"name"`
	} `json:"error"`
	ExitCode     int `json:"exit_code"`
	FilesChanged []struct {
		Path string `json:"path"`
	} `json:"files_changed"`
}

func (r imageResult) text() string {
	var s string
	if len(r.Results) > 0 {
		json.Unmarshal(r.Results[0].Data["text/plain"], &s)
	}
	return s
}

// imageDemo is scripts/demo.sh's session, and one in each other language.
func imageDemo(t *testing.T, s *imageServer) {
	create := func(lang string) string {
		var info struct{ ID string }
		if code, body := s.do(t, "POST", "/v1/sessions", map[string]any{"language": lang, "limits": map[string]any{"memory": "1G"}}, &info); code != 201 {
			t.Fatalf("create a %s session: %d %s", lang, code, body)
		}
		// The pod's name, from the downward API file the chart mounts.
		if !strings.HasPrefix(info.ID, "airlock-0.") {
			t.Errorf("session id %q does not carry the pod's name", info.ID)
		}
		return info.ID
	}
	execute := func(id, code string) imageResult {
		var r imageResult
		if status, body := s.do(t, "POST", "/v1/sessions/"+id+"/execute", map[string]any{"code": code}, &r); status != 200 {
			t.Fatalf("execute %q: %d %s", code, status, body)
		}
		return r
	}

	id := create("python")
	csv := "month,revenue\nJan,120\nFeb,135\nMar,160\nApr,150\nMay,190\nJun,230\n"
	if code, body := s.do(t, "PUT", "/v1/sessions/"+id+"/files/sales.csv", csv, nil); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	r := execute(id, "import pandas as pd\ndf = pd.read_csv(\"sales.csv\")\ndf.describe()")
	if !strings.Contains(r.text(), "revenue") || r.Results[0].Data["text/html"] == nil {
		t.Errorf("describe(): %+v", r)
	}
	r = execute(id, "ax = df.plot(x=\"month\", y=\"revenue\", marker=\"o\")\nax.figure.savefig(\"revenue.png\")\nprint(\"growth:\", round(df.revenue.iloc[-1] / df.revenue.iloc[0], 2))")
	if r.Stdout != "growth: 1.92\n" || len(r.FilesChanged) != 1 || r.FilesChanged[0].Path != "revenue.png" || len(r.Results) == 0 || r.Results[0].Data["image/png"] == nil {
		t.Errorf("plot: stdout %q, files %v, %d results", r.Stdout, r.FilesChanged, len(r.Results))
	}
	code, png := s.do(t, "GET", "/v1/sessions/"+id+"/files/revenue.png", nil, nil)
	if code != 200 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("download: %d, %d bytes", code, len(png))
	}
	if r = execute(id, "df.no_such_column"); r.Error == nil || r.Error.Name != "AttributeError" {
		t.Errorf("error: %+v", r)
	}
	if r = execute(id, "import sklearn, numpy\n(len(df), sklearn.__version__)"); !strings.HasPrefix(r.text(), "(6, '1.") {
		t.Errorf("state and scikit-learn: %q", r.text())
	}
	if code, _ := s.do(t, "DELETE", "/v1/sessions/"+id, nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := s.do(t, "GET", "/v1/sessions/"+id, nil, nil); code != 404 && code != 410 {
		t.Errorf("a deleted session: %d", code)
	}

	id = create("bash")
	if r = execute(id, "x=41; echo $((x + 1)) ${BASH_VERSION%%.*}"); r.Stdout != "42 5\n" {
		t.Errorf("bash: %+v", r)
	}
	id = create("javascript")
	if r = execute(id, "const xs = [1, 2, 3].map(x => x * 2)\nxs"); !strings.Contains(r.text(), "2, 4, 6") {
		t.Errorf("javascript: %+v", r)
	}
	var one imageResult
	if code, body := s.do(t, "POST", "/v1/execute", map[string]any{"code": "import numpy as np\nprint(np.arange(4).sum())"}, &one); code != 200 || one.Stdout != "6\n" {
		t.Errorf("one-shot: %d %s", code, body)
	}
}

// checkImageLeftovers: nothing mounted from the test's root, no cgroup of
// the test's parent.
func checkImageLeftovers(t *testing.T, rootfs string) {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		if strings.Contains(sc.Text(), rootfs) {
			t.Errorf("left mounted: %s", sc.Text())
		}
	}
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/" + imageCgroupParent + "*")
	more, _ := filepath.Glob("/sys/fs/cgroup/" + imageCgroupParent + "*")
	if left := append(matches, more...); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}
