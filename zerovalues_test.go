package capgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// The types docs/ARCHITECTURE.md says are configured through exported
// fields ("How things are configured"): each exported field's comment
// says what its zero value does, or that the field is required.
var fieldConfigured = map[string][]string{
	".":      {"Gate"},
	"config": {"Service"},
	"client": {"Transport"},
	"http":   {"Classifier", "StaffHandler"},
}

// zeroWords are how a comment states a zero value: "Default …", "nil:
// …", "\"\": …", "0: …", "if set" (unset: nothing), or "required".
var zeroWords = []string{"default", "nil", `"":`, "0:", "(0)", "if set", "required", "zero", "when nil", "invalid value"}

func TestConfiguredFieldsStateTheirZeroValue(t *testing.T) {
	for dir, types := range fieldConfigured {
		fset := token.NewFileSet()
		notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
		pkgs, err := parser.ParseDir(fset, dir, notTest, parser.ParseComments) //nolint:staticcheck // go/packages is not in the standard library
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range types {
			st := findStruct(pkgs, name)
			if st == nil {
				t.Errorf("%s: no struct type %s (docs/ARCHITECTURE.md names it)", dir, name)
				continue
			}
			for _, f := range st.Fields.List {
				for _, n := range f.Names {
					if !n.IsExported() {
						continue
					}
					text := strings.ToLower(f.Doc.Text() + " " + f.Comment.Text())
					ok := false
					for _, w := range zeroWords {
						ok = ok || strings.Contains(text, w)
					}
					if !ok {
						t.Errorf("%s.%s.%s: its comment %q does not say what its zero value does (or that it is required)",
							dir, name, n.Name, strings.TrimSpace(text))
					}
				}
			}
		}
	}
}

func findStruct(pkgs map[string]*ast.Package, name string) *ast.StructType { //nolint:staticcheck // ast.Package: see ParseDir
	for _, p := range pkgs {
		for _, file := range p.Files {
			for _, d := range file.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, s := range g.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
						if st, ok := ts.Type.(*ast.StructType); ok {
							return st
						}
					}
				}
			}
		}
	}
	return nil
}
