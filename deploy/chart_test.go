package deploy

import (
	"airlock/internal/config"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ciValues are the chart's CI values files: every one must lint, render
// and validate.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("want the chart's ci/*-values.yaml (default, userns, gvisor), found %v (%v)", files, err)
	}
	for i, f := range files {
		files[i], _ = filepath.Rel(repoRoot(t), f)
	}
	return files
}

func TestChartLint(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, errOut, err := helm(t, "lint", "--strict", chartDir, "-f", f, "--namespace", "airlock",
				"--kube-version", kubeVersion)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint --strict -f %s: %v\n%s%s", f, err, out, errOut)
			}
		})
	}
}

func TestChartValidates(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, ok := kubeconform(t, render(t, "airlock", "-f", f))
			if !ok {
				t.Fatalf("kubeconform -strict on the chart rendered with %s:\n%s", f, out)
			}
			// Every kind the chart renders has a schema: none skipped.
			if !strings.Contains(out, "Skipped: 0") || strings.Contains(out, "Valid: 0,") {
				t.Fatalf("kubeconform checked nothing, or skipped something:\n%s", out)
			}
		})
	}
}

// TestChartGuideInstall renders the chart with exactly the `helm install`
// command of the Kubernetes guide, and validates the result.
func TestChartGuideInstall(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "guides", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(readme), "\\\n", " ")
	var install []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "helm" && f[1] == "install" {
			install = f
		}
	}
	if install == nil {
		t.Fatal("docs/guides/kubernetes.md has no `helm install` command")
	}
	// helm install NAME CHART -n NS [flags] → helm template with the same.
	args := []string{"template"}
	for _, a := range install[2:] {
		if strings.HasPrefix(a, "#") {
			break
		}
		args = append(args, a)
	}
	args = append(args, "--kube-version", kubeVersion)
	out, errOut, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %v (the guide's install): %v\n%s", args, err, errOut)
	}
	if res, ok := kubeconform(t, out); !ok {
		t.Fatalf("the guide's install renders invalid manifests:\n%s", res)
	}
}

// TestChartShape pins what the design relies on in the default rendering.
func TestChartShape(t *testing.T) {
	objs := objects(t, render(t, "team-a", "-f", chartDir+"/ci/default-values.yaml"))
	sts := find(t, objs, "StatefulSet", "airlock")
	pod := get(sts, "spec", "template")
	podLabels := get(pod, "metadata", "labels").(map[string]any)
	matches := func(sel any) bool {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			return false
		}
		for k, v := range m {
			if podLabels[k] != v {
				return false
			}
		}
		return true
	}

	for _, c := range []struct {
		what string
		got  any
		want any
	}{
		{"pods start and stop in parallel", get(sts, "spec", "podManagementPolicy"), "Parallel"},
		{"pods are named under the headless Service", get(sts, "spec", "serviceName"), "airlock-pods"},
		{"one pod per node", get(pod, "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0, "topologyKey"), "kubernetes.io/hostname"},
		{"privileged by default", get(pod, "spec", "containers", 0, "securityContext", "privileged"), true},
		{"read-only root", get(pod, "spec", "containers", 0, "securityContext", "readOnlyRootFilesystem"), true},
		{"no runtimeClassName on airlock's pods", get(pod, "spec", "runtimeClassName"), nil},
		{"host users by default", get(pod, "spec", "hostUsers"), nil},
		{"readiness is capacity", get(pod, "spec", "containers", 0, "readinessProbe", "httpGet", "path"), "/readyz"},
		{"liveness is health", get(pod, "spec", "containers", 0, "livenessProbe", "httpGet", "path"), "/healthz"},
		{"no service account token", get(pod, "spec", "automountServiceAccountToken"), false},
		{"headless", get(find(t, objs, "Service", "airlock-pods"), "spec", "clusterIP"), "None"},
		{"full pods stay addressable", get(find(t, objs, "Service", "airlock-pods"), "spec", "publishNotReadyAddresses"), true},
		{"creations go to ready pods", get(find(t, objs, "Service", "airlock"), "spec", "publishNotReadyAddresses"), nil},
		{"one pod at a time", get(find(t, objs, "PodDisruptionBudget", "airlock"), "spec", "maxUnavailable"), float64(1)},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	for what, sel := range map[string]any{
		"anti-affinity":          get(pod, "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0, "labelSelector", "matchLabels"),
		"airlock Service":        get(find(t, objs, "Service", "airlock"), "spec", "selector"),
		"airlock-pods Service":   get(find(t, objs, "Service", "airlock-pods"), "spec", "selector"),
		"PodDisruptionBudget":    get(find(t, objs, "PodDisruptionBudget", "airlock"), "spec", "selector", "matchLabels"),
		"StatefulSet selector":   get(sts, "spec", "selector", "matchLabels"),
		"NetworkPolicy (server)": get(find(t, objs, "NetworkPolicy", "airlock"), "spec", "podSelector", "matchLabels"),
	} {
		if !matches(sel) {
			t.Errorf("%s selector %v does not select the airlock pods %v", what, sel, podLabels)
		}
	}

	// The configuration airlock reads: every path in it is something the
	// pod mounts, and nothing secret is in it.
	var cfg struct {
		StateDir string `json:"state_dir"`
		CacheDir string `json:"cache_dir"`
		DataDir  string `json:"data_dir"`
		Server   struct {
			Listen    string `json:"listen"`
			Token     string `json:"token"`
			TokenFile string `json:"token_file"`
		} `json:"server"`
		Cluster struct {
			PodNameFile string `json:"pod_name_file"`
		} `json:"cluster"`
	}
	cm := find(t, objs, "ConfigMap", "airlock")
	if err := json.Unmarshal([]byte(get(cm, "data", "config.json").(string)), &cfg); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	mounts := map[string]string{} // mount path → volume
	for _, m := range get(pod, "spec", "containers", 0, "volumeMounts").([]any) {
		mounts[get(m, "mountPath").(string)] = get(m, "name").(string)
	}
	volumes := map[string]any{}
	for _, v := range get(pod, "spec", "volumes").([]any) {
		volumes[get(v, "name").(string)] = v
	}
	volumeAt := func(file string) any { return volumes[mounts[filepath.Dir(file)]] }
	if cfg.Server.Token != "" {
		t.Error("the token is in the ConfigMap")
	}
	if v := volumeAt(cfg.Server.TokenFile); get(v, "secret", "secretName") != "airlock-token" ||
		get(v, "secret", "items", 0, "path") != filepath.Base(cfg.Server.TokenFile) {
		t.Errorf("server.token_file %q is not the Secret's token: %v", cfg.Server.TokenFile, v)
	}
	if v := volumeAt(cfg.Cluster.PodNameFile); get(v, "downwardAPI", "items", 0, "fieldRef", "fieldPath") != "metadata.name" ||
		get(v, "downwardAPI", "items", 0, "path") != filepath.Base(cfg.Cluster.PodNameFile) {
		t.Errorf("cluster.pod_name_file %q is not the pod's name from the downward API: %v", cfg.Cluster.PodNameFile, v)
	}
	// kubelet makes an emptyDir 0777, and airlock refuses private state
	// below a directory another user could write (package privdir): the
	// init container narrows each directory airlock owns, mounted from
	// the same volume, before airlock starts.
	initc := get(pod, "spec", "initContainers", 0)
	var narrows []string
	for _, a := range get(initc, "command").([]any) {
		narrows = append(narrows, a.(string))
	}
	initMounts := map[string]string{}
	for _, m := range get(initc, "volumeMounts").([]any) {
		initMounts[get(m, "mountPath").(string)] = get(m, "name").(string)
	}
	if len(narrows) < 2 || narrows[0] != "chmod" || narrows[1] != "0755" || get(initc, "image") != get(pod, "spec", "containers", 0, "image") {
		t.Errorf("the init container: %v", initc)
	}
	for _, d := range []string{cfg.StateDir, cfg.CacheDir, cfg.DataDir} {
		if !slices.Contains(narrows, d) || initMounts[d] == "" || initMounts[d] != mounts[d] {
			t.Errorf("%s (volume %q) is not narrowed by the init container (%v, mounts %v)", d, mounts[d], narrows, initMounts)
		}
	}
	if v := volumes[mounts[cfg.StateDir]]; get(v, "emptyDir", "medium") != "Memory" {
		t.Errorf("state_dir %s is not a memory emptyDir: %v", cfg.StateDir, v)
	}
	for _, d := range []string{cfg.CacheDir, "/tmp"} {
		if v := volumes[mounts[d]]; get(v, "emptyDir") == nil {
			t.Errorf("%s is not a writable emptyDir under the read-only root: %v", d, v)
		}
	}
	if port := get(pod, "spec", "containers", 0, "ports", 0, "containerPort"); cfg.Server.Listen != "0.0.0.0:8080" || port != float64(8080) {
		t.Errorf("airlock listens on %s, the container port is %v", cfg.Server.Listen, port)
	}
	if a := get(pod, "metadata", "annotations", "checksum/config"); a == nil {
		t.Error("pods do not restart when the configuration changes")
	}

	// The router runs the configuration of its ConfigMap, with the one rule.
	rcm := find(t, objs, "ConfigMap", "airlock-router")
	conf, _ := get(rcm, "data", "nginx.conf").(string)
	rule := regexp.MustCompile(`"~\^/v1/sessions/\(\?<airlock_pod>airlock-\(0\|\[1-9\]\[0-9\]\{0,3\}\)\)\\\.`)
	if !rule.MatchString(conf) {
		t.Errorf("the router has not the pod rule:\n%s", conf)
	}
	for _, want := range []string{
		"$airlock_dest.airlock-pods.team-a.svc.cluster.local:8080",
		"service airlock.team-a.svc.cluster.local:8080",
		"resolver kube-dns.kube-system.svc.cluster.local",
		"proxy_pass http://$airlock_upstream$request_uri;",
		// Responses (downloads of up to server.max_file_bytes) pass
		// through instead of spooling into the router's small emptyDir.
		// router_test.go sees streaming work either way: nginx passes
		// what it has even when buffering, so this is pinned here.
		"proxy_buffering off;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("router configuration lacks %q", want)
		}
	}
	dep := find(t, objs, "Deployment", "airlock-router")
	c := get(dep, "spec", "template", "spec", "containers", 0)
	if cmd, _ := json.Marshal(get(c, "command")); !strings.Contains(string(cmd), `"-c","/etc/airlock-router/nginx.conf"`) ||
		get(c, "volumeMounts", 0, "mountPath") != "/etc/airlock-router" ||
		get(dep, "spec", "template", "spec", "volumes", 0, "configMap", "name") != "airlock-router" {
		t.Errorf("the router does not run its ConfigMap: %v", c)
	}
	if get(dep, "spec", "template", "metadata", "labels", "app.kubernetes.io/component") != "router" {
		t.Error("router pods are not labelled as the router")
	}
}

// TestChartProfiles pins the isolation options.
func TestChartProfiles(t *testing.T) {
	t.Run("userns", func(t *testing.T) {
		objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/userns-values.yaml"))
		pod := get(find(t, objs, "StatefulSet", "airlock"), "spec", "template", "spec")
		sc := get(pod, "containers", 0, "securityContext")
		for what, c := range map[string][2]any{
			"hostUsers":   {get(pod, "hostUsers"), false},
			"privileged":  {get(sc, "privileged"), false},
			"procMount":   {get(sc, "procMount"), "Unmasked"},
			"seccomp":     {get(sc, "seccompProfile", "type"), "Unconfined"},
			"apparmor":    {get(sc, "appArmorProfile", "type"), "Unconfined"},
			"SYS_ADMIN":   {get(sc, "capabilities", "add", 0), "SYS_ADMIN"},
			"chart token": {get(find(t, objs, "Secret", "airlock"), "data", "token"), "bm90LWEtcmVhbC10b2tlbg=="},
		} {
			if !reflect.DeepEqual(c[0], c[1]) {
				t.Errorf("%s: got %v, want %v", what, c[0], c[1])
			}
		}
		var cfg map[string]any
		json.Unmarshal([]byte(get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)), &cfg)
		if cfg["id_base"] != float64(10000) || cfg["id_count"] != float64(50000) {
			t.Errorf("the userns profile's ids: %v %v", cfg["id_base"], cfg["id_count"])
		}
	})
	t.Run("gvisor", func(t *testing.T) {
		out := render(t, "airlock", "-f", chartDir+"/ci/gvisor-values.yaml")
		if strings.Contains(out, "runtimeClassName") {
			t.Error("the gVisor option put airlock's own pods under a runtimeClassName")
		}
		objs := objects(t, out)
		pod := get(find(t, objs, "StatefulSet", "airlock"), "spec", "template", "spec")
		if get(pod, "containers", 0, "securityContext", "privileged") != true {
			t.Error("gVisor mode runs inside privileged pods")
		}
		var cfg map[string]any
		json.Unmarshal([]byte(get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)), &cfg)
		if cfg["isolation"] != "gvisor" || get(cfg, "server", "token_file") != "/etc/airlock/secret/token" || get(cfg, "server", "max_sessions") != float64(64) {
			t.Errorf("config: %v", cfg)
		}
		for _, o := range objs {
			if strings.Contains(o.name(), "router") {
				t.Errorf("router.enabled=false still rendered %s %s", o.kind(), o.name())
			}
		}
		np := find(t, objs, "NetworkPolicy", "airlock")
		if get(np, "spec", "ingress", 0, "from", 0, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "agents" {
			t.Errorf("networkPolicy.airlockFrom not applied: %v", get(np, "spec", "ingress"))
		}
	})
}

// TestChartRefuses: values the chart must not render.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no token", nil, "auth: set auth.existingSecret"},
		{"chart key overridden", []string{"--set", "auth.token=x", "--set", "config.state_dir=/srv"}, "config.state_dir is set by the chart"},
		{"routing key overridden", []string{"--set", "auth.token=x", "--set", "config.cluster.pod_name_file=/x"}, "config.cluster.pod_name_file is set by the chart"},
		{"unknown value", []string{"--set", "auth.token=x", "--set", "replica=3"}, "replica"},
		{"config injection into nginx", []string{"--set", "auth.token=x", "--set", "router.resolver=1.1.1.1;include /etc/passwd"}, "/router/resolver"},
		{"unknown profile", []string{"--set", "auth.token=x", "--set", "isolation.profile=gvisor"}, "/isolation/profile"},
		{"replicas without a shared store", []string{"--set", "auth.token=x", "--set", "replicas=3"}, "replicas > 1 needs a shared store: set store.postgres.dsnSecret"},
		{"a DSN in the ConfigMap", []string{"--set", "auth.token=x", "--set", "config.store.dsn=postgres://u:pw@db/x"}, "config.store.dsn: the connection string is a secret"},
		{"the store set twice", []string{"--set", "auth.token=x", "--set", "store.postgres.dsnSecret=db", "--set", "config.store.driver=sqlite"}, "config.store.driver is set by the chart"},
		{"persistence set twice", []string{"--set", "auth.token=x", "--set", "persistence.enabled=true", "--set", "config.persistence.shutdown_timeout=5s"}, "config.persistence.shutdown_timeout is set by the chart"},
		{"an unknown access mode", []string{"--set", "auth.token=x", "--set", "persistence.enabled=true", "--set", "persistence.accessModes[0]=ReadOnlyMany"}, "/persistence/accessModes/0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errOut, err := helm(t, append([]string{"template", "airlock", chartDir, "--kube-version", kubeVersion}, c.args...)...)
			if err == nil || !strings.Contains(errOut, c.want) {
				t.Fatalf("helm template %v: err %v, want an error naming %q:\n%s", c.args, err, c.want, errOut)
			}
		})
	}
}

// TestChartBrokenValues: a deliberately broken copy of the values is
// caught twice over. The values schema stops helm; rendered anyway (with
// --skip-schema-validation), the manifests fail kubeconform, which sees
// into the pass-through fields (resources, tolerations) the values schema
// leaves to Kubernetes. The good values pass both (the positive control).
func TestChartBrokenValues(t *testing.T) {
	broken := "deploy/testdata/broken-values.yaml"
	lint, errOut, err := helm(t, "lint", "--strict", chartDir, "-f", broken, "--kube-version", kubeVersion)
	if err == nil {
		t.Fatal("helm lint --strict accepted the broken values")
	}
	for _, want := range []string{"at '/replicas': got string, want integer", "at '/router/service/port': got string, want integer"} {
		if !strings.Contains(lint+errOut, want) {
			t.Errorf("helm lint did not report %q:\n%s%s", want, lint, errOut)
		}
	}
	out, ok := kubeconform(t, render(t, "airlock", "-f", broken, "--skip-schema-validation"))
	if ok {
		t.Fatalf("kubeconform accepted the broken manifests:\n%s", out)
	}
	for _, want := range []string{
		"StatefulSet airlock is invalid",
		"at '/spec/replicas': got string, want integer",
		"'limtis' not allowed",
		"'efect' not allowed",
		"at '/spec/ports/0/port': got string, want integer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubeconform did not report %q:\n%s", want, out)
		}
	}
	if out, ok := kubeconform(t, render(t, "airlock", "-f", chartDir+"/ci/default-values.yaml", "--skip-schema-validation")); !ok {
		t.Fatalf("the good values fail kubeconform:\n%s", out)
	}
}

// TestChartConfigIsAirlocks: the config.json the chart renders, for every
// profile, is one airlock accepts: strictly decoded (no key airlock does
// not know) over its defaults, and valid. The secret and pod name files
// are not read here (they exist only in a pod); the image and router
// tests start servers from this configuration.
func TestChartConfigIsAirlocks(t *testing.T) {
	for _, values := range []string{"default-values.yaml", "gvisor-values.yaml", "userns-values.yaml", "postgres-values.yaml", "persistence-values.yaml"} {
		objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/"+values))
		raw := get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)
		cfg := config.Default()
		if err := config.Decode([]byte(raw), &cfg); err != nil {
			t.Errorf("%s: airlock refuses the chart's configuration: %v\n%s", values, err, raw)
			continue
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: the chart's configuration is invalid: %v\n%s", values, err, raw)
		}
		if !cfg.Cluster.Enabled() || cfg.Server.TokenFile == "" {
			t.Errorf("%s: no pod name or token file: %+v %+v", values, cfg.Cluster, cfg.Server)
		}
	}
}

// TestChartSharedStore: with store.postgres.dsnSecret, every pod reads
// the connection string from that Secret as a file (store.dsn_file),
// never from the ConfigMap, may reach the database's port (and DNS) and
// nothing else; without it, a single pod's SQLite and no egress at all.
func TestChartSharedStore(t *testing.T) {
	objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/postgres-values.yaml"))
	sts := find(t, objs, "StatefulSet", "airlock")
	pod := get(sts, "spec", "template")
	raw := get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)
	var cfg map[string]any
	json.Unmarshal([]byte(raw), &cfg)
	file, _ := get(cfg, "store", "dsn_file").(string)
	if get(cfg, "store", "driver") != "postgres" || file == "" || get(cfg, "store", "dsn") != nil || get(cfg, "store", "lease_timeout") != "15s" {
		t.Fatalf("the store in config.json: %v", get(cfg, "store"))
	}
	if get(sts, "spec", "replicas") != float64(3) {
		t.Errorf("replicas %v", get(sts, "spec", "replicas"))
	}
	var vol any
	for _, m := range get(pod, "spec", "containers", 0, "volumeMounts").([]any) {
		if get(m, "mountPath") == filepath.Dir(file) {
			for _, v := range get(pod, "spec", "volumes").([]any) {
				if get(v, "name") == get(m, "name") {
					vol = v
				}
			}
		}
	}
	if get(vol, "secret", "secretName") != "airlock-db" || get(vol, "secret", "items", 0, "key") != "dsn" || get(vol, "secret", "items", 0, "path") != filepath.Base(file) {
		t.Errorf("store.dsn_file %s is not the Secret's dsn: %v", file, vol)
	}
	np := find(t, objs, "NetworkPolicy", "airlock")
	if get(np, "spec", "egress", 0, "ports", 0, "port") != float64(5432) || get(np, "spec", "egress", 0, "to", 0, "ipBlock", "cidr") != "10.2.0.5/32" ||
		get(np, "spec", "egress", 1, "ports", 0, "port") != float64(53) || len(get(np, "spec", "egress").([]any)) != 2 {
		t.Errorf("the pods' egress with a store: %v", get(np, "spec", "egress"))
	}

	single := objects(t, render(t, "airlock", "-f", chartDir+"/ci/default-values.yaml"))
	var one map[string]any
	json.Unmarshal([]byte(get(find(t, single, "ConfigMap", "airlock"), "data", "config.json").(string)), &one)
	if one["store"] != nil || get(find(t, single, "StatefulSet", "airlock"), "spec", "replicas") != float64(1) {
		t.Errorf("without a store: %v, %v replicas", one["store"], get(find(t, single, "StatefulSet", "airlock"), "spec", "replicas"))
	}
	if e := get(find(t, single, "NetworkPolicy", "airlock"), "spec", "egress"); e == nil || len(e.([]any)) != 0 {
		t.Errorf("egress without a store: %v", e)
	}
}

// TestChartPersistence: with persistence.enabled every pod's data_dir
// (where airlock keeps paused sessions and the E2B token key) is a
// PersistentVolumeClaim of its own from the StatefulSet's
// volumeClaimTemplates, kept when the set is deleted or scaled down;
// airlock pauses every session on SIGTERM within shutdown_timeout, which
// the pod's grace period covers with room to spare. Without it, an
// emptyDir, no pause on shutdown and the plain grace period.
func TestChartPersistence(t *testing.T) {
	objs := objects(t, render(t, "airlock", "-f", chartDir+"/ci/persistence-values.yaml"))
	sts := find(t, objs, "StatefulSet", "airlock")
	pod := get(sts, "spec", "template")
	raw := get(find(t, objs, "ConfigMap", "airlock"), "data", "config.json").(string)
	cfg := config.Default()
	if err := config.Decode([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.Persistence.Enabled || cfg.Persistence.OnShutdown != "pause" || cfg.Persistence.ShutdownTimeout.D().Seconds() != 90 {
		t.Errorf("persistence in config.json: %+v", cfg.Persistence)
	}
	grace, _ := get(pod, "spec", "terminationGracePeriodSeconds").(float64)
	if grace < cfg.Persistence.ShutdownTimeout.D().Seconds()+10 {
		t.Errorf("terminationGracePeriodSeconds %v leaves SIGTERM no time to pause within %s", grace, cfg.Persistence.ShutdownTimeout)
	}
	claim := get(sts, "spec", "volumeClaimTemplates", 0)
	if get(claim, "metadata", "name") != "data" || get(claim, "spec", "resources", "requests", "storage") != "50Gi" ||
		get(claim, "spec", "storageClassName") != "fast-ssd" || get(claim, "spec", "accessModes", 0) != "ReadWriteOnce" {
		t.Errorf("the data claim: %v", claim)
	}
	if get(sts, "spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted") != "Retain" || get(sts, "spec", "persistentVolumeClaimRetentionPolicy", "whenScaled") != "Retain" {
		t.Errorf("claim retention: %v", get(sts, "spec", "persistentVolumeClaimRetentionPolicy"))
	}
	// data_dir (and so persistence.dir under it) is mounted from the claim,
	// not from a volume of the pod's.
	mounted := false
	for _, m := range get(pod, "spec", "containers", 0, "volumeMounts").([]any) {
		if get(m, "mountPath") == cfg.DataDir {
			mounted = get(m, "name") == "data"
		}
	}
	for _, v := range get(pod, "spec", "volumes").([]any) {
		if get(v, "name") == "data" {
			t.Errorf("a pod volume shadows the data claim: %v", v)
		}
	}
	if !mounted || cfg.Persistence.Dir != "" {
		t.Errorf("data_dir %s is not the claim's mount (persistence.dir %q)", cfg.DataDir, cfg.Persistence.Dir)
	}

	plain := objects(t, render(t, "airlock", "-f", chartDir+"/ci/default-values.yaml"))
	psts := find(t, plain, "StatefulSet", "airlock")
	var pcfg map[string]any
	json.Unmarshal([]byte(get(find(t, plain, "ConfigMap", "airlock"), "data", "config.json").(string)), &pcfg)
	if get(psts, "spec", "volumeClaimTemplates") != nil || pcfg["persistence"] != nil || get(psts, "spec", "template", "spec", "terminationGracePeriodSeconds") != float64(30) {
		t.Errorf("without persistence: claims %v, config %v, grace %v", get(psts, "spec", "volumeClaimTemplates"), pcfg["persistence"],
			get(psts, "spec", "template", "spec", "terminationGracePeriodSeconds"))
	}
}
