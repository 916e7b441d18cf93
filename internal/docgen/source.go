package docgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// source holds the comments of one package's declarations, read from
// its Go files (tests left out).
type source struct {
	// fields: type name → field name → its comment.
	fields map[string]map[string]string
	// types: type name → its comment.
	types map[string]string
	// values: name of a var or const → its comment.
	values map[string]string
	// strs: name of a string constant → its value.
	strs map[string]string
	// errs: the text of errors.New("...") → the name of the var it sets.
	errs map[string]string
}

func parseSource(dir string) (*source, error) {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(matches) == 0 {
		return nil, fmt.Errorf("no Go files in %s: %v", dir, err)
	}
	s := &source{fields: map[string]map[string]string{}, types: map[string]string{}, values: map[string]string{},
		strs: map[string]string{}, errs: map[string]string{}}
	for _, name := range matches {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, b, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					s.types[sp.Name.Name] = text(first(sp.Doc, g.Doc, len(g.Specs) == 1))
					if st, ok := sp.Type.(*ast.StructType); ok {
						s.fields[sp.Name.Name] = structDocs(fset, st)
					}
				case *ast.ValueSpec:
					doc := text(first(sp.Doc, g.Doc, len(g.Specs) == 1))
					if doc == "" && sp.Comment != nil {
						doc = text(sp.Comment)
					}
					for i, n := range sp.Names {
						s.values[n.Name] = doc
						if i >= len(sp.Values) {
							continue
						}
						if lit, ok := sp.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil && g.Tok == token.CONST {
								s.strs[n.Name] = v
							}
						}
						if call, ok := sp.Values[i].(*ast.CallExpr); ok && len(call.Args) == 1 {
							if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
								if lit, ok := call.Args[0].(*ast.BasicLit); ok {
									if v, err := strconv.Unquote(lit.Value); err == nil {
										s.errs[v] = n.Name
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return s, nil
}

// first is a spec's own comment, else its declaration's when the
// declaration has this spec alone.
func first(own, decl *ast.CommentGroup, alone bool) *ast.CommentGroup {
	if own != nil || !alone {
		return own
	}
	return decl
}

// structDocs reads the comment of every field of st. A field without one
// shares the comment just above it when the two are adjacent and that
// comment names it ("MaxAge and MaxSize bound the log").
func structDocs(fset *token.FileSet, st *ast.StructType) map[string]string {
	out := map[string]string{}
	prevDoc, prevEnd := "", -1
	for _, f := range st.Fields.List {
		doc := text(f.Doc)
		if doc == "" && f.Comment != nil {
			doc = text(f.Comment)
		}
		line := fset.Position(f.Pos()).Line
		if doc == "" && line == prevEnd+1 && len(f.Names) > 0 && mentions(prevDoc, f.Names[0].Name) {
			doc = prevDoc
		}
		for _, n := range f.Names {
			out[n.Name] = doc
		}
		prevDoc, prevEnd = doc, fset.Position(f.End()).Line
	}
	return out
}

// text is a comment's text on one line.
func text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// mentions reports whether doc has the identifier name as a word.
func mentions(doc, name string) bool {
	for _, loc := range identRE.FindAllStringIndex(doc, -1) {
		if doc[loc[0]:loc[1]] == name {
			return true
		}
	}
	return false
}

// rename replaces in doc each identifier of names (Go names) by what
// names maps it to, except after a dot (jail.Layout) or inside code.
func rename(doc string, names map[string]string) string {
	var b strings.Builder
	last, inCode := 0, false
	for _, loc := range identRE.FindAllStringIndex(doc, -1) {
		inCode = inCode != (strings.Count(doc[last:loc[0]], "`")%2 == 1)
		b.WriteString(doc[last:loc[0]])
		word := doc[loc[0]:loc[1]]
		to, ok := names[word]
		if ok && !inCode && (loc[0] == 0 || doc[loc[0]-1] != '.') {
			b.WriteString(to)
		} else {
			b.WriteString(word)
		}
		last = loc[1]
	}
	b.WriteString(doc[last:])
	return b.String()
}

// exportedCamel reports whether name is an exported identifier of at
// least two words (AuditRefuse, not Required), which prose cannot mean.
func exportedCamel(name string) bool {
	upper := 0
	for _, r := range name {
		if unicode.IsUpper(r) {
			upper++
		}
	}
	return name != "" && unicode.IsUpper(rune(name[0])) && upper >= 2
}
