package capgate_test

import (
	"errors"
	"flag"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateDeps = flag.Bool("update-deps", false, `rewrite the "depends on" column of docs/ARCHITECTURE.md's package table`)

const module = "github.com/capgate/capgate"

// The layers of the module, by package (relative to the module; "" is the
// root). Every package outside internal/, cmd/, tools/, bench/ and test/
// is in exactly one of them: a new package must be placed here.
var (
	// core: the engine and its vocabulary, the policy and config models,
	// the answer's format, and the services over the ports the adapters
	// implement (config, journal, adaptive, idempotency). It imports no
	// adapter and no kit.
	core = []string{"", "policy", "settings", "tune", "repeat", "adaptive", "status", "header", "answer", "config", "journal", "idempotency", "frontproxy"}
	// adapters: one per dependency or edge (a store, a front door, a
	// sink). An adapter imports the core, never another adapter, but for
	// the leans allowed below.
	adapters = []string{"memory", "redis", "sqlite", "postgres", "http", "decide", "identity", "logsink", "metrics", "client"}
	// kits: conformance suites and fakes for tests. A kit imports the core
	// and other kits, no adapter.
	kits = []string{"mock", "lanetest", "configtest", "journaltest"}
	// assemblies: what a command runs, each built of the core and the
	// adapters and testable on its own, so that cmd/ only wires (flags,
	// environment, exit codes): the server process, the demo, the log
	// analysis, the load generator. An assembly imports any layer but the
	// kits, and other assemblies; nothing but cmd/, tools/, bench/ and
	// test/ imports an assembly.
	assemblies = []string{"server", "demo", "analyze", "loadgen"}
	// allowed are the adapter-to-adapter imports the design keeps, and
	// why.
	allowed = map[[2]string]string{
		{"http", "identity"}:   "identity is the front doors' caller identification (the Identifier resolvers), split off from http",
		{"decide", "identity"}: "the decision service bounds the user it is told by identity's username rule (MaxUsername), the gateway's",
	}
)

// TestArchitectureDependencies: docs/ARCHITECTURE.md's package table has
// one row per package, and its "depends on" column is what the package's
// non-test files import; no adapter or kit imports an adapter (but for
// the leans allowed), and the core imports neither. go test -run
// TestArchitectureDependencies -update-deps . rewrites the column.
func TestArchitectureDependencies(t *testing.T) {
	imports := moduleImports(t)
	checkLayers(t, imports)

	b, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	rows, err := packageRows(lines)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	changed := false
	for _, r := range rows {
		if seen[r.pkg] {
			t.Errorf("docs/ARCHITECTURE.md: package %q has two rows", r.pkg)
		}
		seen[r.pkg] = true
		imp, ok := imports[r.pkg]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md: the row of %q names no package of the module", r.pkg)
			continue
		}
		want := dependsOn(imp)
		if r.cells[2] == want {
			continue
		}
		if *updateDeps {
			r.cells[2] = want
			lines[r.line] = "| " + strings.Join(r.cells, " | ") + " |"
			changed = true
			continue
		}
		t.Errorf("docs/ARCHITECTURE.md: %s depends on\n\t%s\nnot\n\t%s\n(go test -run TestArchitectureDependencies -update-deps .)", r.label(), want, r.cells[2])
	}
	var missing []string
	for pkg := range imports {
		if !seen[pkg] && documented(pkg) {
			missing = append(missing, pkg)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("docs/ARCHITECTURE.md's package table has no row for %q: add one (what it owns), then -update-deps", missing)
	}
	if changed {
		if err := os.WriteFile("docs/ARCHITECTURE.md", []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// documented reports whether pkg has a row of its own: bench/ and test/
// are drivers and suites, not parts.
func documented(pkg string) bool {
	return !strings.HasPrefix(pkg, "bench/") && !strings.HasPrefix(pkg, "test/")
}

// checkLayers checks the import rules of the layers above.
func checkLayers(t *testing.T, imports map[string][]string) {
	t.Helper()
	layer := map[string]string{}
	for name, pkgs := range map[string][]string{"core": core, "adapter": adapters, "kit": kits, "assembly": assemblies} {
		for _, p := range pkgs {
			if l, ok := layer[p]; ok {
				t.Errorf("package %q is both %s and %s", p, l, name)
			}
			layer[p] = name
			if _, ok := imports[p]; !ok {
				t.Errorf("the %s %q is no package of the module", name, p)
			}
		}
	}
	for pkg, imp := range imports {
		l, ok := layer[pkg]
		if !ok {
			if documented(pkg) && !strings.HasPrefix(pkg, "internal/") && !strings.HasPrefix(pkg, "cmd/") && !strings.HasPrefix(pkg, "tools/") {
				t.Errorf("package %q is in no layer: place it in core, adapters, kits or assemblies (deps_test.go)", pkg)
			}
			if strings.HasPrefix(pkg, "internal/") {
				for _, dep := range imp {
					if p, ok := strings.CutPrefix(dep, module+"/"); ok && !strings.HasPrefix(p, "internal/") {
						t.Errorf("the helper %s imports %s: internal/ helpers import only the standard library, other helpers and outside modules", pkg, p)
					}
				}
			}
			continue
		}
		for _, dep := range imp {
			d, ok := modulePackage(dep)
			if !ok {
				continue
			}
			switch dl := layer[d]; {
			case l == "core" && (dl == "adapter" || dl == "kit"):
				t.Errorf("the core package %q imports the %s %q", label(pkg), dl, d)
			case l == "adapter" && dl == "adapter" && allowed[[2]string{pkg, d}] == "":
				t.Errorf("the adapter %q imports the adapter %q: adapters talk through the core only", pkg, d)
			case l == "adapter" && dl == "kit":
				t.Errorf("the adapter %q imports the test kit %q", pkg, d)
			case l == "kit" && dl == "adapter":
				t.Errorf("the test kit %q imports the adapter %q: kits are given the stores they test", pkg, d)
			case (l == "core" || l == "adapter" || l == "kit") && dl == "assembly":
				t.Errorf("the %s %q imports the assembly %q: assemblies are what commands run, built of the layers below", l, label(pkg), d)
			case l == "assembly" && dl == "kit":
				t.Errorf("the assembly %q imports the test kit %q", pkg, d)
			case l == "assembly" && strings.HasPrefix(d, "cmd/"):
				t.Errorf("the assembly %q imports the command %q", pkg, d)
			case (l == "core" || l == "adapter" || l == "kit") && (strings.HasPrefix(d, "cmd/") || strings.HasPrefix(d, "tools/")):
				t.Errorf("%q imports the tool %q", label(pkg), d)
			}
		}
	}
}

// modulePackage returns dep relative to the module ("" for the root), and
// whether it is the module's.
func modulePackage(dep string) (string, bool) {
	if dep == module {
		return "", true
	}
	return strings.CutPrefix(dep, module+"/")
}

func label(pkg string) string {
	if pkg == "" {
		return "capgate (root)"
	}
	return pkg
}

// moduleImports returns each package of the module (relative path, "" for
// the root) and the imports of its non-test files, as the go tool builds
// them here.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != "." && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata" ||
			d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			return nil
		}
		rel := filepath.ToSlash(path)
		if rel == "." {
			rel = ""
		}
		out[rel] = p.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// outside names the modules the module imports as the table names them.
var outside = map[string]string{
	"github.com/redis/go-redis/v9":        "go-redis",
	"github.com/jackc/pgx/v5":             "pgx",
	"modernc.org/sqlite":                  "modernc.org/sqlite",
	"go.yaml.in/yaml/v3":                  "yaml v3",
	"github.com/prometheus/client_golang": "client_golang",
	"github.com/prometheus/client_model":  "client_model",
	"github.com/go-jose/go-jose/v4":       "go-jose",
	"github.com/chromedp/chromedp":        "chromedp",
	"github.com/alicebob/miniredis/v2":    "miniredis",
}

// notable are the standard library's packages the column names: the ones
// that make a package an HTTP or SQL edge.
var notable = []string{"net/http", "database/sql", "os/exec"}

// dependsOn renders the imports as the column lists them: root, the
// module's packages (the internal/ ones last), the outside modules, then
// the standard library with its notable packages.
func dependsOn(imports []string) string {
	var root bool
	var mine, helpers, mods, std []string
	stdlib := false
	for _, imp := range imports {
		if p, ok := modulePackage(imp); ok {
			switch {
			case p == "":
				root = true
			case strings.HasPrefix(p, "internal/") || strings.Contains(p, "/internal/"):
				helpers = append(helpers, "`"+p+"`")
			default:
				mine = append(mine, "`"+p+"`")
			}
			continue
		}
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") {
			stdlib = true
			if slices.Contains(notable, imp) {
				std = append(std, imp)
			}
			continue
		}
		name := imp
		for path, n := range outside {
			if imp == path || strings.HasPrefix(imp, path+"/") {
				name = n
				break
			}
		}
		if !slices.Contains(mods, name) {
			mods = append(mods, name)
		}
	}
	slices.Sort(mine)
	slices.Sort(helpers)
	slices.Sort(mods)
	slices.Sort(std)
	var parts []string
	if root {
		parts = append(parts, "root")
	}
	parts = append(append(append(parts, mine...), helpers...), mods...)
	if stdlib {
		s := "standard library"
		if len(std) > 0 {
			s += " (" + strings.Join(std, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// packageRow is a row of the package table: its cells, the package its
// first cell names, and its line.
type packageRow struct {
	cells []string
	pkg   string
	line  int
}

func (r packageRow) label() string { return label(r.pkg) }

// packageRows reads the rows of the table headed "| package | owns |
// depends on |".
func packageRows(lines []string) ([]packageRow, error) {
	start := slices.Index(lines, "| package | owns | depends on |")
	if start < 0 {
		return nil, fmt.Errorf(`docs/ARCHITECTURE.md has no table headed "| package | owns | depends on |"`)
	}
	var rows []packageRow
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "| "); i++ {
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(lines[i], "| "), " |"), " | ")
		if len(cells) != 3 {
			return nil, fmt.Errorf("docs/ARCHITECTURE.md:%d: %d cells, want 3 (package, owns, depends on; no | inside a cell)", i+1, len(cells))
		}
		name, _, ok := strings.Cut(strings.TrimPrefix(cells[0], "`"), "`")
		if !ok || !strings.HasPrefix(cells[0], "`") {
			return nil, fmt.Errorf("docs/ARCHITECTURE.md:%d: the first cell %q does not start with a package in backquotes", i+1, cells[0])
		}
		if strings.Count(cells[0], "`") != 2 && !strings.Contains(cells[0], "(") {
			return nil, fmt.Errorf("docs/ARCHITECTURE.md:%d: %q names more than one package: one row each", i+1, cells[0])
		}
		if name == "capgate" {
			name = ""
		}
		rows = append(rows, packageRow{cells: cells, pkg: name, line: i})
	}
	return rows, nil
}
