// Command testprogress reads `go test -json` on stdin and prints what
// `go test` would — each package's result — as each package ends, plus a
// line naming what still runs whenever nothing was printed for a while.
// `go test ./...` prints a package's line only when the packages before it
// in order have printed theirs, and nothing while one runs, so a long
// package (the gateway's processes, the bypass suite) leaves minutes of
// silence; scripts/test.sh pipes the suite through this instead.
//
// A failed package's output is printed whole at its end, as go test does;
// the skip notes of internal/skipnote ("SKIP ./redis: …") as they come.
// The exit code is 1 when a package or a build failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// quiet is the longest stretch with no line printed.
const quiet = 30 * time.Second

// maxKept bounds the output kept per package, for a failure's report.
const maxKept = 4 << 20

func main() {
	failed, err := run(os.Stdin, os.Stdout, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of test2json (go doc test2json), with the build
// events of `go test -json` (ImportPath, Action build-output/build-fail).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// pkg is a package as the stream showed it so far.
type pkg struct {
	started time.Time
	tests   []string // running, in start order
	out     strings.Builder
}

// state is what run knows; its methods write to w.
type state struct {
	w       io.Writer
	begun   time.Time
	pkgs    map[string]*pkg
	done    int
	failed  bool
	longest string
	longEl  float64
}

// run copies the stream's results to w, and a progress line after every
// stretch of every with nothing printed. It reports whether something
// failed.
func run(r io.Reader, w io.Writer, every time.Duration) (bool, error) {
	lines := make(chan string)
	errc := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		errc <- sc.Err()
		close(lines)
	}()
	s := &state{w: w, begun: time.Now(), pkgs: map[string]*pkg{}}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				s.summary()
				return s.failed, <-errc
			}
			if s.line(l) {
				t.Reset(every)
			}
		case <-t.C:
			s.heartbeat()
			t.Reset(every)
		}
	}
}

// line handles one line of the stream; it reports whether it printed.
func (s *state) line(l string) bool {
	var e event
	if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil {
		fmt.Fprintln(s.w, l) // go test's own words (a build error without -json events)
		return true
	}
	name := e.Package
	if name == "" {
		name = e.ImportPath
	}
	switch e.Action {
	case "build-output":
		s.get(name).keep(e.Output)
		return false
	case "build-fail":
		s.failed = true
		fmt.Fprintf(s.w, "FAIL\t%s [build failed]\n%s", name, s.get(name).out.String())
		return true
	case "start":
		s.get(name).started = e.Time
		return false
	}
	p := s.get(name)
	if e.Test != "" {
		switch e.Action {
		case "run":
			p.tests = append(p.tests, e.Test)
		case "pass", "fail", "skip":
			if i := slices.Index(p.tests, e.Test); i >= 0 {
				p.tests = slices.Delete(p.tests, i, i+1)
			}
		case "output":
			p.keep(e.Output)
		}
		return false
	}
	switch e.Action {
	case "output":
		p.keep(e.Output)
		if strings.HasPrefix(e.Output, "SKIP ") {
			fmt.Fprint(s.w, e.Output)
			return true
		}
		return false
	case "pass", "fail", "skip":
		return s.end(name, p, e)
	}
	return false
}

func (s *state) get(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{}
		s.pkgs[name] = p
	}
	return p
}

func (p *pkg) keep(out string) {
	if p.out.Len() < maxKept {
		p.out.WriteString(out)
	}
}

// end prints a package's result, as go test does.
func (s *state) end(name string, p *pkg, e event) bool {
	delete(s.pkgs, name)
	s.done++
	if e.Elapsed > s.longEl {
		s.longest, s.longEl = name, e.Elapsed
	}
	switch {
	case e.Action == "fail":
		s.failed = true
		fmt.Fprintf(s.w, "%sFAIL\t%s\t%.3fs\n", p.out.String(), name, e.Elapsed)
	case e.Action == "skip":
		fmt.Fprintf(s.w, "?   \t%s\t[no test files]\n", name)
	default:
		fmt.Fprintf(s.w, "ok  \t%s\t%.3fs\n", name, e.Elapsed)
	}
	return true
}

// heartbeat says what runs now: each running package with its time and
// its running tests (the first three), or that the tests still build.
func (s *state) heartbeat() {
	var running []string
	names := make([]string, 0, len(s.pkgs))
	for n, p := range s.pkgs {
		if !p.started.IsZero() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		p := s.pkgs[n]
		d := time.Since(p.started).Round(time.Second)
		item := fmt.Sprintf("%s %s", n, d)
		if len(p.tests) > 0 {
			tests := p.tests
			more := ""
			if len(tests) > 3 {
				tests, more = tests[:3], fmt.Sprintf(" +%d", len(p.tests)-3)
			}
			item += " (" + strings.Join(tests, ", ") + more + ")"
		}
		running = append(running, item)
	}
	at := time.Since(s.begun).Round(time.Second)
	if len(running) == 0 {
		fmt.Fprintf(s.w, "… %s: building the test binaries (%d packages done so far)\n", at, s.done)
		return
	}
	fmt.Fprintf(s.w, "… %s: running %s (%d packages done so far)\n", at, strings.Join(running, "; "), s.done)
}

func (s *state) summary() {
	if s.longest != "" {
		fmt.Fprintf(s.w, "== %d packages in %s; the longest: %s %.0fs\n", s.done, time.Since(s.begun).Round(time.Second), s.longest, s.longEl)
	}
}
