package layers

import (
	"errors"
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shared may be imported by every package but themselves: the wire
// types, the error vocabulary and configuration data; and the leaves
// every layer uses (who a request acts for, undo stacks, terminal-safe
// text, whether a private directory is the server's own), which import
// nothing of airlock but shared.
var shared = []string{"apitype", "errdefs", "config", "identity", "cleanup", "termtext", "privdir"}

// rule is what one package may import.
type rule struct {
	// layer names its place, for messages.
	layer string
	// may lists the airlock packages it may import besides shared
	// (internal/ left out).
	may []string
	// std: nothing outside the standard library but may (and shared).
	std bool
	// noShared: not even the shared packages (they import one another
	// only as listed).
	noShared bool
}

// front is what serves requests over HTTP may import: sessions and what a
// request names, never the root, pools, instances or jails.
var front = []string{"httpapi/...", "session", "notebook", "egress", "workspace", "portproxy", "cluster"}

// rules is the layout: every package of the module, top to bottom. A new
// package gets a line here, in its layer, importing only from below it.
// A name ending in "/..." stands for the package and every one under it,
// as go's patterns do (in the table and in a may list): httpapi/... is
// each HTTP API (v1, E2B's) and the edge they share.
var rules = map[string]rule{
	// The command: flags and printing. It talks to a server through
	// client (and mcp's bridge), and to the composition root for what
	// runs in its own process (serve, run --cold, keys, audit).
	"../cmd/airlock": {layer: "command", may: []string{"server", "client", "mcp", "bench", "doctor", "runtimes", "workspace"}},
	// The sandbox init alone: what a sandbox runs and nothing else.
	"../cmd/airlock-init": {layer: "command", noShared: true, may: []string{"jailinit"}},

	// Tools built on the root or on a client.
	"bench":   {layer: "tool", may: []string{"client", "cgroup", "egress", "gvisor", "image", "secrets"}},
	"doctor":  {layer: "tool", may: []string{"server", "store", "cgroup", "cluster", "egress", "exeseal", "fontcache", "gvisor", "image", "jail", "landlock", "seccomp"}},
	"docgen":  {layer: "tool", may: []string{"metrics", "bench"}},
	"layers":  {layer: "tool"},
	"testenv": {layer: "test", noShared: true, std: true},

	// The one composition root.
	"server": {layer: "root", may: []string{"httpapi/...", "console", "mcp", "audit", "quota", "metrics", "directory", "session", "pool", "instance", "image", "jail", "gvisor", "egress", "fontcache", "runtimes", "store", "cluster", "client", "broker", "secrets", "lockfile"}},

	// The front: what serves requests, and what hears sessions. The HTTP
	// APIs (httpapi/v1, E2B's httpapi/e2b, ...) sit over httpapi's shared
	// edge; MCP speaks to a server as a client.
	"httpapi/...": {layer: "front", may: front},
	"console":     {layer: "front"},
	"mcp":         {layer: "front", may: []string{"client", "workspace"}},
	"audit":       {layer: "front", may: []string{"session", "store"}},
	"quota":       {layer: "front", may: []string{"session", "store"}},
	"metrics":     {layer: "front", may: []string{"session", "egress"}},
	"directory":   {layer: "front", may: []string{"session", "store"}},

	// Sessions, and what they are made of.
	"session":  {layer: "session", may: []string{"instance", "packages", "egress", "redact", "coderules", "runtimes", "watch", "workspace", "cgroup", "cluster", "image", "pauseimage", "broker", "secrets"}},
	"packages": {layer: "session part", may: []string{"egress", "workspace"}},
	"notebook": {layer: "session part"},
	"pool":     {layer: "pool", may: []string{"instance", "zygote", "jail", "image", "runtimes", "workspace"}},
	"instance": {layer: "instance", may: []string{"zygote", "gvisor", "jail", "image", "egress", "runtimes", "watch", "workspace", "cgroup"}},

	// The kernels a sandbox runs on.
	"zygote": {layer: "kernel", may: []string{"jail", "runtimes"}},
	"gvisor": {layer: "kernel", may: []string{"jail", "jailinit", "rootfs", "cgroup", "workspace"}},
	"jail":   {layer: "jail", may: []string{"jailinit", "seccomp", "landlock", "cgroup", "rootfs", "workspace", "exeseal", "loopback", "lockfile"}},
	// The sandbox's init and the control protocol's wire: the init is
	// every sandbox's PID 1, so it imports no shared package (errdefs
	// pulls in net/http) and only the mechanisms it applies.
	"jailinit": {layer: "jail", noShared: true, may: []string{"landlock", "rootfs", "loopback"}},

	// Mechanisms: each one thing, importing no other but as listed.
	"seccomp":  {layer: "mechanism"},
	"landlock": {layer: "mechanism"},
	"cgroup":   {layer: "mechanism"},
	"rootfs":   {layer: "mechanism"},
	"loopback": {layer: "mechanism"},
	"exeseal":  {layer: "mechanism"},
	// Lock files a process holds while it lives (state dir, host ids).
	"lockfile":  {layer: "mechanism"},
	"workspace": {layer: "mechanism"},
	"egress":    {layer: "mechanism", may: []string{"loopback", "secrets"}},
	"watch":     {layer: "mechanism", may: []string{"cgroup"}},
	"redact":    {layer: "mechanism", noShared: true},
	"coderules": {layer: "mechanism"},
	"runtimes":  {layer: "mechanism"},
	"image":     {layer: "mechanism"},
	"fontcache": {layer: "mechanism"},
	"store":     {layer: "mechanism"},
	"cluster":   {layer: "mechanism"},
	"portproxy": {layer: "mechanism"},
	// A paused session's image on disk, read and written through a
	// workspace's beneath-the-root access.
	"pauseimage": {layer: "mechanism", may: []string{"workspace"}},
	// Declared tools and the in-sandbox endpoint sandboxed code calls
	// them through; credentials stay on this side.
	"broker": {layer: "mechanism", may: []string{"secrets"}},
	// Secrets bound to hosts: values, their placeholders, the replacer
	// the egress gate substitutes with, and the CA sandboxes trust for
	// the bound hosts only.
	"secrets": {layer: "mechanism"},

	// The one Go client, for the command, MCP and the benchmark.
	"client": {layer: "client"},

	// Beneath everything: the wire types and the error vocabulary import
	// only the standard library; configuration is data (no compiled
	// redaction or rule objects), over the wire's limit types.
	"apitype":  {layer: "shared", noShared: true, std: true},
	"errdefs":  {layer: "shared", noShared: true, std: true},
	"config":   {layer: "shared", noShared: true, std: true, may: []string{"apitype", "errdefs"}},
	"identity": {layer: "leaf", noShared: true, std: true},
	"cleanup":  {layer: "leaf", noShared: true, std: true},
	"termtext": {layer: "leaf", noShared: true},
	// Whether a directory of private state is the server's own.
	"privdir": {layer: "leaf", noShared: true, std: true},

	// Tests' helpers and test-only packages.
	"jail/jailtest":         {layer: "test", may: []string{"jail", "gvisor", "runtimes", "testenv"}},
	"image/imagetest":       {layer: "test", may: []string{"image", "testenv"}},
	"watch/watchtest":       {layer: "test"},
	"notebook/notebooktest": {layer: "test", may: []string{"testenv"}},
	"store/pgtest":          {layer: "test", may: []string{"testenv"}},
	"../e2e":                {layer: "test"},
	"../deploy":             {layer: "test"},
}

// debts are imports that break the rules and are known to: each says
// why it is there and where it belongs. The test fails when one is paid
// (the import is gone) until its line goes too; never add one to make a
// new import pass.
var debts = map[string]string{
	"../cmd/airlock -> image": "airlock template builds, imports and removes templates on the store in the command's process; it belongs behind server, as keys and audit are",
}

const module = "airlock"

// pkg is one package of the module.
type pkg struct {
	rel     string // to internal/ ("session"), or "../cmd/airlock" outside it
	path    string // its import path
	dir     string
	imports []string // non-test imports
}

// packages lists the module's packages (test-only ones too).
func packages(t *testing.T) []pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root: %v", err)
	}
	var out []pkg
	err = filepath.WalkDir(root, func(dir string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); dir != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "vendor") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && dir != root {
			return filepath.SkipDir // another module (deploy/tools)
		}
		p, err := build.Default.ImportDir(dir, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		// Files other platforms build import too (p.Imports is this
		// platform's).
		imports := slices.Clone(p.Imports)
		for _, name := range p.IgnoredGoFiles {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, spec := range f.Imports {
				if imp, err := strconv.Unquote(spec.Path.Value); err == nil && !slices.Contains(imports, imp) {
					imports = append(imports, imp)
				}
			}
		}
		rel, _ := filepath.Rel(root, dir)
		path := module + "/" + filepath.ToSlash(rel)
		name, ok := strings.CutPrefix(path, module+"/internal/")
		if !ok {
			name = "../" + strings.TrimPrefix(path, module+"/")
		}
		out = append(out, pkg{rel: name, path: path, dir: dir, imports: imports})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// short names an airlock import as the table does ("" when it is not one).
func short(imp string) string {
	name, ok := strings.CutPrefix(imp, module+"/")
	if !ok {
		return ""
	}
	if rest, ok := strings.CutPrefix(name, "internal/"); ok {
		return rest
	}
	return "../" + name
}

// standard reports whether imp is in the standard library.
func standard(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".") && first != module
}

// matches reports whether a table name (maybe "x/...") names the package
// rel.
func matches(name, rel string) bool {
	if prefix, ok := strings.CutSuffix(name, "/..."); ok {
		return rel == prefix || strings.HasPrefix(rel, prefix+"/")
	}
	return name == rel
}

// ruleOf returns the table's rule for the package rel: its own line, or
// else the line of a "/..." name over it.
func ruleOf(rel string) (rule, bool) {
	if r, ok := rules[rel]; ok {
		return r, true
	}
	for name, r := range rules {
		if strings.HasSuffix(name, "/...") && matches(name, rel) {
			return r, true
		}
	}
	return rule{}, false
}

// checkImports returns what breaks the table, one line each.
func checkImports(pkgs []pkg) []string {
	var broken []string
	for _, p := range pkgs {
		r, ok := ruleOf(p.rel)
		if !ok {
			broken = append(broken, fmt.Sprintf("%s is not in the table of internal/layers/layers_test.go: add it to its layer, with what it may import", p.path))
			continue
		}
		allowed := slices.Clone(r.may)
		if !r.noShared {
			allowed = append(allowed, shared...)
		}
		for _, imp := range p.imports {
			name := short(imp)
			switch {
			case name == "" && r.std && !standard(imp):
				broken = append(broken, fmt.Sprintf("%s imports %s: a %s package imports only the standard library%s", p.path, imp, r.layer, list(" and ", allowed)))
			case name != "" && debts[p.rel+" -> "+name] != "":
			case name != "" && !slices.ContainsFunc(allowed, func(a string) bool { return matches(a, name) }):
				broken = append(broken, fmt.Sprintf("%s imports %s: %s (%s) may import%s", p.path, imp, p.rel, r.layer, list(" only ", allowed)))
			}
		}
	}
	return broken
}

// list says which airlock packages names are, after sep.
func list(sep string, names []string) string {
	if len(names) == 0 {
		return " nothing of airlock"
	}
	return sep + strings.Join(names, ", ")
}

// Every package imports only what its layer allows: the request path reads
// top to bottom with no upward import, mechanisms stand alone, the wire
// types are a leaf, configuration is data.
func TestImportsFollowTheLayers(t *testing.T) {
	pkgs := packages(t)
	for _, line := range checkImports(pkgs) {
		t.Error(line)
	}
	// The table names only packages that exist.
	seen := map[string]bool{}
	edges := map[string]bool{}
	for _, p := range pkgs {
		seen[p.rel] = true
		for _, imp := range p.imports {
			edges[p.rel+" -> "+short(imp)] = true
		}
	}
	for edge, why := range debts {
		if !edges[edge] {
			t.Errorf("the debt %s is paid: remove its line from debts", edge)
		} else {
			t.Logf("known debt: %s: %s", edge, why)
		}
	}
	for name, r := range rules {
		found := false
		for rel := range seen {
			found = found || matches(name, rel)
		}
		if !found {
			t.Errorf("the table names %s, which is not a package of the module: remove its line", name)
		}
		for _, m := range r.may {
			if _, ok := rules[m]; !ok {
				t.Errorf("%s may import %s, which is not in the table", name, m)
			}
		}
	}
}

// The check catches what it is for: each mutant of a real package's
// imports is refused with a message naming the rule.
func TestImportRulesCatchMutants(t *testing.T) {
	pkgs := packages(t)
	find := func(rel string) pkg {
		for _, p := range pkgs {
			if p.rel == rel {
				return p
			}
		}
		t.Fatalf("no package %s", rel)
		return pkg{}
	}
	for _, c := range []struct {
		pkg, adds, want string
	}{
		{"apitype", module + "/internal/config", "apitype (shared) may import nothing of airlock"},
		{"apitype", "golang.org/x/sys/unix", "a shared package imports only the standard library"},
		{"config", module + "/internal/redact", "config (shared) may import only apitype, errdefs"},
		{"../cmd/airlock", module + "/internal/httpapi/v1", "../cmd/airlock (command) may import only"},
		{"../cmd/airlock", module + "/internal/store", "imports airlock/internal/store"},
		{"jail", module + "/internal/watch", "jail (jail) may import only"},
		{"egress", module + "/internal/rootfs", "egress (mechanism) may import only loopback"},
		{"session", module + "/internal/jail", "session (session) may import only"},
		{"instance", module + "/internal/session", "imports airlock/internal/session"},
	} {
		p := find(c.pkg)
		p.imports = append(slices.Clone(p.imports), c.adds)
		broken := checkImports([]pkg{p})
		if len(broken) != 1 || !strings.Contains(broken[0], c.want) {
			t.Errorf("%s importing %s: %q, want one line saying %q", c.pkg, c.adds, broken, c.want)
		}
	}
	// The HTTP APIs, wherever they live, sit in the front layer.
	for _, c := range []struct {
		rel, adds, want string
	}{
		{"httpapi/v1", module + "/internal/session", ""},
		{"httpapi/e2b", module + "/internal/httpapi", ""},
		{"httpapi/e2b", module + "/internal/pool", "httpapi/e2b (front) may import only"},
		{"httpapi/v1", module + "/internal/server", "httpapi/v1 (front) may import only"},
		{"httpapi", module + "/internal/jail", "httpapi (front) may import only"},
		{"session", module + "/internal/httpapi/v1", "session (session) may import only"},
	} {
		broken := checkImports([]pkg{{rel: c.rel, path: module + "/internal/" + c.rel, imports: []string{c.adds}}})
		if c.want == "" && len(broken) != 0 || c.want != "" && (len(broken) != 1 || !strings.Contains(broken[0], c.want)) {
			t.Errorf("%s importing %s: %q, want %q", c.rel, c.adds, broken, c.want)
		}
	}
	if broken := checkImports([]pkg{{rel: "newthing", path: module + "/internal/newthing"}}); len(broken) != 1 || !strings.Contains(broken[0], "not in the table") {
		t.Errorf("a package not in the table: %q", broken)
	}
}

// docOf returns the package comments of the package in dir: those of its
// non-test files, or of its test files for a test-only package.
func docOf(t *testing.T, dir string) (name string, docs []string) {
	t.Helper()
	for _, tests := range []bool{false, true} {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
			return strings.HasSuffix(fi.Name(), "_test.go") == tests
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		for n, p := range pkgs {
			if strings.HasSuffix(n, "_test") {
				continue
			}
			name = n
			for _, f := range p.Files {
				if f.Doc != nil {
					docs = append(docs, f.Doc.Text())
				}
			}
		}
		if name != "" {
			return name, docs
		}
	}
	return name, docs
}

// checkDoc says what is wrong with a package's comments ("" when nothing):
// exactly one, in the house style.
func checkDoc(path, name string, docs []string) string {
	if len(docs) != 1 {
		return fmt.Sprintf("%s has %d package comments: want exactly one", path, len(docs))
	}
	doc := docs[0]
	want := "Package " + name + " owns "
	if name == "main" {
		want = "Command " + filepath.Base(path) + " "
	}
	if !strings.HasPrefix(doc, want) {
		first, _, _ := strings.Cut(doc, "\n")
		return fmt.Sprintf("%s's package comment starts %q: want %q and what it owns", path, first, want+"…")
	}
	if !strings.Contains(doc, "must never") {
		return fmt.Sprintf("%s's package comment does not say what it must never do", path)
	}
	return ""
}

// Every package has one package comment, in the house style: "Package X
// owns …" (a command: "Command X …"), and what it must never do.
func TestPackageDocs(t *testing.T) {
	for _, p := range packages(t) {
		name, docs := docOf(t, p.dir)
		if msg := checkDoc(p.path, name, docs); msg != "" {
			t.Error(msg)
		}
	}
}

// The doc check catches what it is for.
func TestPackageDocRulesCatchMutants(t *testing.T) {
	good := "Package x owns a thing.\n\nIt must never do another.\n"
	for _, c := range []struct {
		name string
		docs []string
		want string
	}{
		{"x", []string{good}, ""},
		{"x", nil, "0 package comments"},
		{"x", []string{good, good}, "2 package comments"},
		{"x", []string{"Package x is a thing.\n\nIt must never do another.\n"}, `want "Package x owns …"`},
		{"x", []string{"Package x owns a thing.\n"}, "must never do"},
		{"main", []string{"Command x runs.\n\nIt must never grow.\n"}, ""},
	} {
		got := checkDoc("airlock/internal/x", c.name, c.docs)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%q: %q, want %q", c.docs, got, c.want)
		}
	}
}
