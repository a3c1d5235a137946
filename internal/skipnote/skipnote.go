// Package skipnote lets a package's tests say, at the end of their run,
// which suites skipped for want of a real service (Redis, PostgreSQL,
// Chromium, Prometheus, Django) and what to set to run them: one line per
// suite, not one per test.
//
// `go test ./...` shows nothing a passing package prints unless -v, so
// the lines go to the terminal itself (/dev/tty) when there is one and
// the output is not already shown; with -v, or a terminal on stdout (go
// test in one package's directory), they go to stdout; with neither (CI,
// a pipe) they go to stdout too, where `go test -v` shows them.
//
// Run (and Heartbeat) also say on the terminal, every 30 s, that a
// package's tests still run: go test shows nothing of a package until it
// ends.
package skipnote

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	notes = map[string]*note{} // by suite; requires mu held
)

type note struct {
	how   string // what to set to run it
	tests int    // the tests it skipped
}

// Skip records that tb skips for want of what suite needs, and skips it.
// suite names the suite ("the Redis tests"); how says what runs it ("set
// CAPGATE_TEST_REDIS_URL=redis://127.0.0.1:6379/15").
func Skip(tb testing.TB, suite, how string) {
	tb.Helper()
	Record(suite, how)
	tb.Skip(suite + " skipped: " + how + " to run them")
}

// Record records a suite skipped, for a caller that skips (or fails) tb
// itself.
func Record(suite, how string) {
	mu.Lock()
	defer mu.Unlock()
	n := notes[suite]
	if n == nil {
		n = &note{how: how}
		notes[suite] = n
	}
	n.tests++
}

// Main runs m, writes the lines and exits with m's code.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs m, writes the lines and returns m's code, for a TestMain with
// more to do before it exits. While the tests run, it says every 30 s on
// the terminal that they still do (Heartbeat).
func Run(m *testing.M) int {
	stop := Heartbeat()
	code := m.Run()
	stop()
	Report()
	return code
}

// Report writes one line per suite recorded, where `go test` shows it.
func Report() {
	lines := Lines()
	if len(lines) == 0 {
		return
	}
	w, done := out()
	defer done()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// Lines returns the lines Report writes, sorted.
func Lines() []string {
	mu.Lock()
	defer mu.Unlock()
	pkg := packagePath()
	var lines []string
	for suite, n := range notes {
		tests := "1 test"
		if n.tests != 1 {
			tests = fmt.Sprintf("%d tests", n.tests)
		}
		lines = append(lines, fmt.Sprintf("SKIP %s: %s (%s): %s to run them", pkg, suite, tests, n.how))
	}
	slices.Sort(lines)
	return lines
}

func out() (io.Writer, func()) {
	if testing.Verbose() || isTerminal(os.Stdout) {
		return os.Stdout, func() {}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return tty, func() { _ = tty.Close() }
	}
	return os.Stdout, func() {}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// packagePath is the tests' package as ./dir from the module root (the
// tests run in their package's directory), or the directory's name.
func packagePath() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Base(wd)
		}
		dir = parent
	}
}

// reset forgets the suites recorded (for this package's own test).
func reset() {
	mu.Lock()
	notes = map[string]*note{}
	mu.Unlock()
}
