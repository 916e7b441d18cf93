package apitype

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every Audit constant is in AuditKinds: `airlock audit --kind` and
// GET /v1/audit refuse kinds that are not.
func TestAuditKindsComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "apitype.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Audit") || i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			n++
			if !slices.Contains(AuditKinds(), v) {
				t.Errorf("%s (%q) is not in AuditKinds", name.Name, v)
			}
		}
		return true
	})
	if n != len(AuditKinds()) {
		t.Errorf("%d Audit constants, %d kinds", n, len(AuditKinds()))
	}
}
