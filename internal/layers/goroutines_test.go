package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// reports are the methods of testing.T that fail, skip or log: called
// after the test has returned, each panics, and the panic ends every
// other test of the package.
var reports = map[string]bool{
	"Error": true, "Errorf": true, "Fatal": true, "Fatalf": true, "FailNow": true, "Fail": true,
	"Skip": true, "Skipf": true, "SkipNow": true, "Log": true, "Logf": true,
}

// isT reports whether x names a test's T by the names the tests give it
// (t, tb, or a struct's field t).
func isT(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "t" || x.Name == "tb"
	case *ast.SelectorExpr:
		return x.Sel.Name == "t" || x.Sel.Name == "tb"
	}
	return false
}

// checkGoroutines lists the goroutines of a test file that report to t,
// directly or by handing t to a helper. A goroutine can outlive its test
// (the test failed before it waited, or a call it makes ends only when
// the test's context or server does), and its late report then panics;
// it sends what it found on a channel instead, and the test reports it.
func checkGoroutines(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		g, ok := n.(*ast.GoStmt)
		if !ok {
			return true
		}
		ast.Inspect(g.Call, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && reports[s.Sel.Name] && isT(s.X) {
				out = append(out, fset.Position(c.Pos()).String()+": a goroutine calls "+s.Sel.Name)
			}
			for _, a := range c.Args {
				if isT(a) {
					out = append(out, fset.Position(c.Pos()).String()+": a goroutine hands t to a call")
				}
			}
			return true
		})
		return false
	})
	return out
}

// No goroutine of a test reports to its T: it sends what it found on a
// channel, and the test reports it (a late t.Error panicked once and
// took the whole e2e package with it).
func TestGoroutinesReportOnChannels(t *testing.T) {
	checkFiles(t, packages(t), true, checkGoroutines)
}

// The goroutine check catches what it is for.
func TestGoroutineRuleCatchesMutants(t *testing.T) {
	for _, c := range []struct {
		body string
		want string
	}{
		{`go func() { done <- work() }()`, ""},
		{`go func() { if err := work(); err != nil { t.Error(err) } }()`, "calls Error"},
		{`go func() { t.Fatalf("x") }()`, "calls Fatalf"},
		{`go func() { s.t.Errorf("x") }()`, "calls Errorf"},
		{`go func() { tb.Log("x") }()`, "calls Log"},
		{`go func() { helper(t, 1) }()`, "hands t"},
		{`go check(t)`, "hands t"},
		{`go func() { log.Printf("x"); b.Error("not a T's name") }()`, ""},
		{`t.Error("not in a goroutine")`, ""},
	} {
		src := "package x\nfunc f() {\n" + c.body + "\n}\n"
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x_test.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(checkGoroutines(fset, f), "; ")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.body, got, c.want)
		}
	}
}
