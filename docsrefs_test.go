package capgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The map of the code in docs/ARCHITECTURE.md ("Where things are") and
// README.md's key places name files and functions; a rename or a move
// that leaves them behind makes this fail. Every file named (`x.go`,
// `dir/x.lua`) exists: by its path, or, for a bare name, in some package;
// every Go name written as code that looks like one (`Gate.Admit`,
// `config.Service.Save`, `fullLanes`) is declared somewhere in the module.
func TestDocsNameCodeThatExists(t *testing.T) {
	names, files, inFile := declaredNames(t)
	for _, doc := range []struct{ path, from, to string }{
		{"docs/ARCHITECTURE.md", "## Where things are", "<!-- public API"},
		{"README.md", "", "\n## "},
	} {
		b, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		i := strings.Index(text, doc.from)
		if i < 0 {
			t.Fatalf("%s has no %q", doc.path, doc.from)
		}
		text = text[i+len(doc.from):]
		if j := strings.Index(text, doc.to); j >= 0 {
			text = text[:j]
		}
		// A file followed by a name ("`gate.go`: `Gate.Admit`") says where
		// the name is declared.
		for _, m := range fileThenName.FindAllStringSubmatch(text, -1) {
			file, name := m[1], m[2]
			declared, ok := inFile[file]
			if !ok {
				continue // a bare name of a file in another package: checked below
			}
			if !declared[name] && !declared[name[strings.Index(name, ".")+1:]] {
				t.Errorf("%s says %s is in %s; it is not", doc.path, name, file)
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			tok := m[1]
			switch {
			case fileName.MatchString(tok):
				if _, err := os.Stat(tok); err != nil && !files[filepath.Base(tok)] {
					t.Errorf("%s names the file %s, which the repository does not have", doc.path, tok)
				}
			case strings.Contains(tok, "_") || notOurs[tok] || notOurs[tok[:strings.Index(tok+".", ".")]]:
				// a config key (wait.max_seconds), or not this module's Go
			case goName.MatchString(tok) && (strings.Contains(tok, ".") || camel.MatchString(tok)):
				if !names[tok] {
					t.Errorf("%s names %s, which no package declares", doc.path, tok)
				}
			}
		}
	}
}

// notOurs are names the docs write as code that are not this module's Go:
// other packages' (by their package name), the Python package's, config
// keys.
var notOurs = map[string]bool{
	"http": true, "prometheus": true, "flag": true, "goredis": true, "net": true, "context": true,
	"BaseContext": true, "capgate.Client": true, "capgate.asgi": true, "CapacityLimitedMixin": true,
	"names.answers": true, "fairness.by": true,
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	fileName = regexp.MustCompile(`^[\w./-]+\.(go|lua|yaml|yml|py|sh)$`)
	goName   = regexp.MustCompile(`^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$`)
	// camel: an identifier that can only be code (fullLanes, NewGate),
	// not a word of prose or a config key (usage, hold, lease_seconds).
	camel = regexp.MustCompile(`^[a-z]+[A-Z]\w*$|^[A-Z][a-z0-9]+[A-Z]\w*$`)
	// fileThenName: a Go file, then (after a colon, or a space) a name.
	fileThenName = regexp.MustCompile("`([\\w./-]+\\.go)`:? `([A-Za-z_][\\w.]*)`")
)

// declaredNames returns every name the module's Go files declare, alone
// (Admit, fullLanes), with its receiver (Gate.Admit) and with its package
// (capgate.Gate, config.Service.Save; a package by its directory's name
// and by its own), the base names of its files, and by file (its path)
// the names each declares, alone and with their receiver.
func declaredNames(t *testing.T) (names, files map[string]bool, inFile map[string]map[string]bool) {
	t.Helper()
	names, files, inFile = map[string]bool{}, map[string]bool{}, map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		files[d.Name()] = true
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs := []string{f.Name.Name, filepath.Base(filepath.Dir(path))}
		if path == filepath.Join("http", filepath.Base(path)) {
			pkgs = append(pkgs, "capgatehttp") // as the docs import it
		}
		here := map[string]bool{}
		inFile[filepath.ToSlash(path)] = here
		add := func(n string) {
			names[n], here[n] = true, true
			for _, p := range pkgs {
				names[p+"."+n] = true
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name.Name)
					continue
				}
				add(d.Name.Name)
				add(recvName(d.Recv.List[0].Type) + "." + d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name.Name)
						addFields(s, add)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names, files, inFile
}

// addFields adds a struct's fields and an interface's methods as
// Type.Field.
func addFields(s *ast.TypeSpec, add func(string)) {
	var list *ast.FieldList
	switch ty := s.Type.(type) {
	case *ast.StructType:
		list = ty.Fields
	case *ast.InterfaceType:
		list = ty.Methods
	}
	if list == nil {
		return
	}
	for _, f := range list.List {
		for _, n := range f.Names {
			add(s.Name.Name + "." + n.Name)
			add(n.Name)
		}
	}
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
