package logsink_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/logsink"
)

// childEnv selects a child role when the test binary re-runs itself.
const childEnv = "LOGSINK_TEST_CHILD"

// closingMark is what a child writes to stderr when it starts its exit.
const closingMark = "closing"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// runChild emits {"n":1} to stdout and exits the way the gateway does:
// Close with DefaultDrainTimeout, then exit code 0 whatever Close says.
// It reports on stderr when it starts closing and what Close returned.
func runChild(role string) int {
	if role != "exit" {
		fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
		return 2
	}
	s := logsink.New(os.Stdout)
	if err := s.Emit([]byte(`{"n":1}`)); err != nil {
		fmt.Fprintf(os.Stderr, "emit: %v\n", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, closingMark)
	ctx, cancel := context.WithTimeout(context.Background(), logsink.DefaultDrainTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "close: %v\n", err)
	}
	return 0
}

// childCommand returns a command that runs this test binary as a child.
func childCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// Under -race the race runtime sleeps 1 s at exit by default
	// (atexit_sleep_ms); turn that off so the measured exit is the sink's.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), childEnv+"=exit", "GORACE="+gorace)
	return cmd
}

func TestExit_PrintsTheLastLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := childCommand(ctx)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, stderr.String())
	}
	if got, want := string(out), "{\"n\":1}\n"; got != want {
		t.Errorf("child stdout = %q, want %q; stderr:\n%s", got, want, stderr.String())
	}
	if strings.Contains(stderr.String(), "close:") {
		t.Errorf("child's Close failed:\n%s", stderr.String())
	}
}

func TestExit_BlockedStdoutDoesNotHoldUpExit(t *testing.T) {
	// The child's stdout is a pipe that nobody reads, filled up first so
	// that the child's Write blocks. The read end stays open, so the write
	// blocks rather than failing with EPIPE.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fillPipe(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := childCommand(ctx)
	cmd.Stdout = w
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// Read the child's stderr to the end (the child exits), noting when it
	// starts its exit.
	var closing time.Time
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if sc.Text() == closingMark {
			closing = time.Now()
		}
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	exited := time.Now()
	report := strings.Join(lines, "\n")
	if err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, report)
	}
	if closing.IsZero() {
		t.Fatalf("child never started closing; stderr:\n%s", report)
	}
	took := exited.Sub(closing)
	t.Logf("child exited %v after it started closing (drain timeout %v)", took, logsink.DefaultDrainTimeout)
	if took >= 10*time.Second {
		t.Errorf("child took %v to exit after it started closing, want about %v", took, logsink.DefaultDrainTimeout)
	}
	// The drain must have given up, or the pipe was not blocking after all
	// and the test proved nothing.
	if !strings.Contains(report, "close:") || !strings.Contains(report, context.DeadlineExceeded.Error()) {
		t.Errorf("child's Close did not give up at its deadline; stderr:\n%s", report)
	}
}

// fillPipe writes to w until a write would block.
func fillPipe(tb testing.TB, w *os.File) {
	tb.Helper()
	if err := w.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		tb.Fatalf("cannot fill the pipe: %v", err)
	}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for {
		if _, err := w.Write(chunk); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				tb.Fatalf("fill the pipe: %v", err)
			}
			break
		}
	}
	if err := w.SetWriteDeadline(time.Time{}); err != nil {
		tb.Fatal(err)
	}
}
