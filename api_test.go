package leasehold_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds the root package's exported identifiers, so that the
// API stays one spelling per way of holding a lock.
const maxExported = 75

// The root package exports at most maxExported identifiers: consts, vars,
// funcs, types and the exported methods of exported types, in non-test files.
//
//	go test -run TestRootAPIStaysSmall -v .
func TestRootAPIStaysSmall(t *testing.T) {
	names := exportedNames(t, ".")
	t.Logf("%d exported identifiers:\n%s", len(names), strings.Join(names, "\n"))
	if len(names) > maxExported {
		t.Errorf("the root package exports %d identifiers, more than %d", len(names), maxExported)
	}
}

func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	types := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
		for _, d := range file.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						types[ts.Name.Name] = true
					}
				}
			}
		}
	}
	var names []string
	for _, file := range parsed {
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, "func "+d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && types[id.Name] {
					names = append(names, "method "+id.Name+"."+d.Name.Name)
				}
			}
		}
	}
	sort.Strings(names)
	return names
}
