package main

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// syncBuffer is a strings.Builder safe to read while run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func send(t *testing.T, w io.Writer, e event) {
	t.Helper()
	e.Time = time.Now()
	b, _ := json.Marshal(e)
	if _, err := w.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// A package that runs long leaves no stretch of silence longer than the
// heartbeat: the line names it and its running test; results print as
// packages end, in the order they end.
func TestHeartbeatNamesWhatRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w := io.Pipe()
		var out syncBuffer
		var failed bool
		done := make(chan struct{})
		go func() {
			failed, _ = run(r, &out, 30*time.Second)
			close(done)
		}()
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if got := out.String(); !strings.Contains(got, "building the test binaries") {
			t.Errorf("before any package started: %q; want a line saying the tests build", got)
		}
		send(t, w, event{Action: "start", Package: "example.com/slow"})
		send(t, w, event{Action: "run", Package: "example.com/slow", Test: "TestLong"})
		send(t, w, event{Action: "start", Package: "example.com/fast"})
		send(t, w, event{Action: "output", Package: "example.com/fast", Output: "SKIP ./fast: the Redis tests (2 tests): set X to run them\n"})
		send(t, w, event{Action: "pass", Package: "example.com/fast", Elapsed: 0.5})
		time.Sleep(31 * time.Second)
		synctest.Wait()
		got := out.String()
		for _, want := range []string{"SKIP ./fast: the Redis tests", "ok  \texample.com/fast\t0.500s", "running example.com/slow 30s (TestLong)"} {
			if !strings.Contains(got, want) {
				t.Errorf("output %q; want %q in it", got, want)
			}
		}
		send(t, w, event{Action: "output", Package: "example.com/slow", Test: "TestLong", Output: "slow_test.go:9: went wrong\n"})
		send(t, w, event{Action: "fail", Package: "example.com/slow", Test: "TestLong"})
		send(t, w, event{Action: "fail", Package: "example.com/slow", Elapsed: 62})
		w.Close()
		<-done
		got = out.String()
		if !failed || !strings.Contains(got, "slow_test.go:9: went wrong\nFAIL\texample.com/slow\t62.000s") {
			t.Errorf("failed = %v, output %q; want the failure with its output", failed, got)
		}
		if !strings.Contains(got, "the longest: example.com/slow 62s") {
			t.Errorf("output %q; want the summary naming the longest package", got)
		}
	})
}

// A build failure fails the run and shows the compiler's output.
func TestBuildFailure(t *testing.T) {
	in := strings.Join([]string{
		`{"ImportPath":"example.com/broken [example.com/broken.test]","Action":"build-output","Output":"x.go:1: syntax error\n"}`,
		`{"ImportPath":"example.com/broken [example.com/broken.test]","Action":"build-fail"}`,
		`not json: go test's own line`,
	}, "\n")
	var out strings.Builder
	failed, err := run(strings.NewReader(in), &out, time.Hour)
	if err != nil || !failed {
		t.Fatalf("run = %v, %v; want failed", failed, err)
	}
	if got := out.String(); !strings.Contains(got, "FAIL\texample.com/broken [example.com/broken.test] [build failed]\nx.go:1: syntax error") ||
		!strings.Contains(got, "not json: go test's own line") {
		t.Errorf("output %q", got)
	}
}
