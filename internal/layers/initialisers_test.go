package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// compiles are the calls that compile a pattern.
var compiles = map[string]bool{"MustCompile": true, "Compile": true, "MustCompilePOSIX": true, "CompilePOSIX": true}

// checkInitRegexps lists the patterns a file compiles while its package
// is initialised: in a package-level variable's value (outside a function
// literal, which runs later) or in an init function. The airlock binary
// links every package, and Go runs every package's initialisers at each
// start of it: a command (`airlock run --cold` above all) pays for every
// pattern of the server's. They are compiled on first use instead
// (sync.OnceValue).
func checkInitRegexps(fset *token.FileSet, f *ast.File) []string {
	var out []string
	check := func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false
			case *ast.CallExpr:
				if s, ok := n.Fun.(*ast.SelectorExpr); ok && compiles[s.Sel.Name] {
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "regexp" {
						out = append(out, fset.Position(n.Pos()).String()+": regexp."+s.Sel.Name+" runs at every start of the binary")
					}
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok == token.VAR {
				check(d)
			}
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.Name == "init" {
				check(d.Body)
			}
		}
	}
	return out
}

// linked are the packages of the module the binaries under cmd link.
func linked(all []pkg) []pkg {
	byPath := map[string]pkg{}
	for _, p := range all {
		byPath[p.path] = p
	}
	seen := map[string]bool{}
	var out []pkg
	var visit func(p pkg)
	visit = func(p pkg) {
		if seen[p.path] {
			return
		}
		seen[p.path] = true
		out = append(out, p)
		for _, imp := range p.imports {
			if q, ok := byPath[imp]; ok {
				visit(q)
			}
		}
	}
	for _, p := range all {
		if strings.HasPrefix(p.rel, "../cmd/") {
			visit(p)
		}
	}
	return out
}

// No package a binary of airlock links compiles a regular expression
// while it is initialised.
func TestNoPatternsCompiledAtInit(t *testing.T) {
	checkFiles(t, linked(packages(t)), false, checkInitRegexps)
}

// checkFiles runs check on every Go file of pkgs (their tests, or the
// rest), failing t with what it says; finding too few files to check is
// a failure too (the check could not fail).
func checkFiles(t *testing.T, pkgs []pkg, tests bool, check func(*token.FileSet, *ast.File) []string) {
	t.Helper()
	files := 0
	for _, p := range pkgs {
		names, _ := filepath.Glob(filepath.Join(p.dir, "*.go"))
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") != tests {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, msg := range check(fset, f) {
				t.Error(msg)
			}
		}
	}
	if files < 100 {
		t.Fatalf("only %d files found: the check could not fail", files)
	}
}

// The initialiser check catches what it is for.
func TestInitRegexpRuleCatchesMutants(t *testing.T) {
	for _, c := range []struct {
		src  string
		want string
	}{
		{"var re = regexp.MustCompile(`x`)", "regexp.MustCompile"},
		{"var (\n\ta = 1\n\tre, _ = regexp.Compile(`x`)\n)", "regexp.Compile"},
		{"var m = map[string]*regexp.Regexp{\"a\": regexp.MustCompile(`x`)}", "regexp.MustCompile"},
		{"func init() { re = regexp.MustCompilePOSIX(`x`) }", "regexp.MustCompilePOSIX"},
		{"var re = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`x`) })", ""},
		{"func f() *regexp.Regexp { return regexp.MustCompile(`x`) }", ""},
		{"var s = other.MustCompile(`x`)", ""},
	} {
		src := "package x\n" + c.src + "\n"
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(checkInitRegexps(fset, f), "; ")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.src, got, c.want)
		}
	}
}
