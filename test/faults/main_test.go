//go:build faults

package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	shortRun = flag.Bool("faults.short", false, "small durations (the CI run: scenarios 1, 3, 6, 7, 12, 13 and 14)")
	docPath  = flag.String("faults.doc", "", "write the table of figures to this Markdown file")
	docCmd   = flag.String("faults.cmd", "scripts/faults.sh", "the command named in the doc")
	binFlag  = flag.String("faults.bin", "", "a built capgate binary (default: build ./cmd/capgate)")
)

// capgateBin is the binary under test.
var capgateBin string

// moduleRoot is the repository root.
var moduleRoot string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		tmp, err := os.MkdirTemp("", "capgate-faults-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		if err := setup(tmp); err != nil {
			fmt.Fprintln(os.Stderr, "faults: setup:", err)
			return 1
		}
		started := time.Now()
		code := m.Run()
		stopSharedPG()
		if *docPath != "" {
			if err := writeDoc(*docPath, started); err != nil {
				fmt.Fprintln(os.Stderr, "faults: write doc:", err)
				return 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// setup installs what is missing, builds capgate and checks that its serve
// command takes the flags the suite uses.
func setup(tmp string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Println("faults: redis-server missing; installing the Debian package")
		if out, err := run(ctx, "apt-get", "install", "-y", "-qq", "redis-server"); err != nil {
			if _, err2 := run(ctx, "apt-get", "update", "-qq"); err2 != nil {
				return fmt.Errorf("apt-get update: %w", err2)
			}
			if out, err = run(ctx, "apt-get", "install", "-y", "-qq", "redis-server"); err != nil {
				return fmt.Errorf("install redis-server: %w: %s", err, out)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		return fmt.Errorf("PostgreSQL 15 server binaries not found in %s (apt-get install postgresql-15): %w", pgBin, err)
	}
	out, err := run(ctx, "go", "env", "GOMOD")
	if err != nil {
		return err
	}
	moduleRoot = filepath.Dir(strings.TrimSpace(out))
	capgateBin = *binFlag
	if capgateBin == "" {
		// A binary built once for every suite (.ci/run: the image's).
		capgateBin = os.Getenv("CAPGATE_TEST_BIN")
	}
	if capgateBin == "" {
		capgateBin = filepath.Join(tmp, "capgate")
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", capgateBin, "./cmd/capgate")
		cmd.Dir = moduleRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/capgate: %w\n%s", err, out)
		}
		fmt.Printf("faults: built capgate in %v\n", time.Since(start).Round(time.Millisecond))
	}
	return checkFlags(ctx)
}

// checkFlags fails clearly when the binary's serve does not take the
// flags of README.md's Settings.
func checkFlags(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, capgateBin, "serve", "-h")
	out, _ := cmd.CombinedOutput()
	var missing []string
	for _, f := range []string{"listen", "upstream", "redis", "redis-sentinels", "redis-master", "database",
		"task-id", "mode", "identity", "tokens", "log-file", "shutdown-timeout"} {
		if !strings.Contains(string(out), "-"+f+" ") && !strings.Contains(string(out), "-"+f+"\n") &&
			!strings.Contains(string(out), "-"+f+"=") && !strings.Contains(string(out), "-"+f+",") {
			missing = append(missing, "--"+f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("capgate serve does not take %s (its -h says:\n%s)\n%s",
			strings.Join(missing, " "), lastLines(string(out), 15), flagHint)
	}
	return nil
}

// The shared PostgreSQL cluster, started on first use.
var (
	pgOnce   sync.Once
	pgShared *pgCluster
	pgErr    error
)

// sharedPG returns the suite's PostgreSQL cluster and a fresh database in
// it for this test.
func sharedPG(t testing.TB, db string) (*pgCluster, string) {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgShared, pgErr = startPostgres(ctx)
	})
	if pgErr != nil {
		t.Fatalf("PostgreSQL: %v", pgErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := pgShared.createDB(ctx, db)
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	return pgShared, u
}

func stopSharedPG() {
	if pgShared != nil {
		pgShared.remove()
	}
}

// scenario is one row of the table.
type scenario struct {
	N       int
	Name    string
	Pass    bool
	Figures string
	Took    time.Duration
}

var (
	resultsMu sync.Mutex
	results   = map[int]*scenario{}
)

// names are the scenarios of issue 5.
var names = map[int]string{
	1: "Limits hold", 2: "Shadow changes nothing", 3: "Redis hangs", 4: "Redis dies and comes back",
	5: "Sentinel failover", 6: "A gateway dies mid-call", 7: "Clients abort",
	8: "Long calls keep their leases", 9: "The config database locks or stops",
	10: "The log sink blocks", 11: "Bad input",
	12: "A gateway holding waiters dies",
	13: "A flood from one user",
}

// begin starts scenario n: it records the row when the test ends, pass or
// fail, and returns a function that sets its one line of figures.
func begin(t *testing.T, n int) func(format string, args ...any) {
	t.Helper()
	start := time.Now()
	s := &scenario{N: n, Name: names[n]}
	t.Cleanup(func() {
		s.Pass = !t.Failed()
		s.Took = time.Since(start)
		if s.Figures == "" {
			s.Figures = "(no figures: the scenario stopped early)"
		}
		verdict := "PASS"
		if !s.Pass {
			verdict = "FAIL"
		}
		fmt.Printf("FAULTS %2d %-36s %s %6.1fs | %s\n", n, s.Name, verdict, s.Took.Seconds(), s.Figures)
		resultsMu.Lock()
		results[n] = s
		resultsMu.Unlock()
	})
	return func(format string, args ...any) {
		s.Figures = fmt.Sprintf(format, args...)
		t.Log(s.Figures)
	}
}

// duration picks the full or the short value.
func duration(full, short time.Duration) time.Duration {
	if *shortRun {
		return short
	}
	return full
}

// docMarker ends the part of docs/RELIABILITY.md the suite writes; what
// follows it is written by hand (runs of one scenario, the restart
// benchmarks, the notes) and a regeneration keeps it.
const docMarker = "<!-- scripts/faults.sh rewrites everything above this line; what follows is kept -->"

// spliceDoc returns the generated header and table, the marker, and
// what followed the marker in old; docNotes when old has no marker (a
// first run, or a file from before the marker).
func spliceDoc(generated, old string) string {
	tail := docNotes
	if _, after, ok := strings.Cut(old, docMarker+"\n"); ok {
		tail = after
	}
	return generated + "\n" + docMarker + "\n" + tail
}

// writeDoc writes docs/RELIABILITY.md: the header and table anew, and the
// hand-written part below docMarker as it was.
func writeDoc(path string, started time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	host, _ := os.Hostname()
	cpu := cpuModel()
	uname, _ := run(ctx, "uname", "-srm")
	redisV, _ := run(ctx, "redis-server", "--version")
	pgV, _ := run(ctx, filepath.Join(pgBin, "postgres"), "--version")
	commit, _ := run(ctx, "git", "-C", moduleRoot, "rev-parse", "--short", "HEAD")
	load, _ := os.ReadFile("/proc/loadavg")

	fmt.Fprintf(&b, "# capgate reliability: the fault suite\n\n")
	fmt.Fprintf(&b, "Generated by `%s` (test/faults, build tag `faults`). Every figure below was measured\n", *docCmd)
	fmt.Fprintf(&b, "on real processes on loopback: redis-server (master, replica, three Sentinels), a PostgreSQL\n")
	fmt.Fprintf(&b, "of the suite's own, two or three `capgate serve` gateways with different task ids sharing\n")
	fmt.Fprintf(&b, "them, a counting upstream (simapi) and client load. Regenerate it with `scripts/faults.sh`.\n\n")
	fmt.Fprintf(&b, "- Date: %s (suite took %s)\n", started.UTC().Format("2006-01-02 15:04 MST"),
		time.Since(started).Round(time.Second))
	fmt.Fprintf(&b, "- Machine: %s, %s, %d CPUs (%s), load average at the end %s\n", host,
		strings.TrimSpace(uname), runtime.NumCPU(), cpu, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(&b, "- Software: capgate %s, %s, %s, %s\n", strings.TrimSpace(commit),
		runtime.Version(), firstFields(redisV, 3), strings.TrimSpace(pgV))
	fmt.Fprintf(&b, "- Command: `%s`\n\n", *docCmd)

	fmt.Fprintf(&b, "| # | scenario | result | figures | time |\n|---|---|---|---|---|\n")
	var ns []int
	for n := range names {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	resultsMu.Lock()
	defer resultsMu.Unlock()
	for _, n := range ns {
		s, ok := results[n]
		if !ok {
			fmt.Fprintf(&b, "| %d | %s | not run | | |\n", n, names[n])
			continue
		}
		verdict := "pass"
		if !s.Pass {
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %.0f s |\n", n, s.Name, verdict,
			strings.ReplaceAll(s.Figures, "|", "\\|"), s.Took.Seconds())
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(spliceDoc(b.String(), string(old))), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func firstFields(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}
