//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// gated counts the calls that got a capacity decision (one log line each).
func gated(res []result) int {
	n := 0
	for _, x := range res {
		if x.err == nil && x.decision != "" {
			n++
		}
	}
	return n
}

func rate(res []result, d time.Duration) float64 { return float64(len(res)) / d.Seconds() }

func TestS10LogSinkBlocks(t *testing.T) {
	figures := begin(t, 10)
	ctx := context.Background()
	r := &rig{up: newUpstream(simapi.DemoUsers())}
	// Quick calls, so that many lines are written.
	r.up.api.Latency = func(string, int, bool) time.Duration { return 2*time.Millisecond + rand.N(8*time.Millisecond) }
	r.redis = startRedis(t)
	r.rc = r.redis.client(t)
	_, db := sharedPG(t, "s10")
	setConfig(t, db, roomyConfig()...)
	pipe := func() (*os.File, *os.File) {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close(); pw.Close() })
		// The smallest pipe the kernel allows (a page), so it fills fast.
		const fSetPipeSize = 1031 // F_SETPIPE_SZ
		if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, pw.Fd(), fSetPipeSize, 4096); errno != 0 {
			t.Logf("F_SETPIPE_SZ: %v (the pipe keeps its default size)", errno)
		}
		return pr, pw
	}
	pr1, pw1 := pipe()
	_, pw2 := pipe()
	gw1 := startGateway(t, gwOptions{Task: "gw1", Upstream: r.up.listen(t, "gw1"), Redis: r.redis.url(), Database: db,
		Env: faultEnv, Stdout: pw1})
	gw2 := startGateway(t, gwOptions{Task: "gw2", Upstream: r.up.listen(t, "gw2"), Redis: r.redis.url(), Database: db,
		Env: faultEnv, Stdout: pw2})
	pw1.Close() // the gateways hold the write ends now
	pw2.Close()
	r.gws = []*gateway{gw1, gw2}
	phase := duration(6*time.Second, 4*time.Second)

	// A: nobody reads gw1's stdout.
	blocked := runLoad(ctx, loadSpec{Gateways: r.urls(gw1), Clients: 24, Duration: phase, Users: loadUsers})
	var base []time.Duration
	for _, x := range blocked {
		if a, ok := r.up.added(x); ok {
			base = append(base, a)
		}
	}
	// B: the pipe drains.
	type tally struct{ lines, dropped int }
	readDone := make(chan tally, 1)
	go func() {
		var tl tally
		sc := bufio.NewScanner(pr1)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var rec logRecord
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Event == "ocl_capacity" {
				tl.lines++
				tl.dropped += rec.Dropped
			}
		}
		readDone <- tl
	}()
	drained := runLoad(ctx, loadSpec{Gateways: r.urls(gw1), Clients: 24, Duration: phase, Users: loadUsers})
	var after []time.Duration
	for _, x := range drained {
		if a, ok := r.up.added(x); ok {
			after = append(after, a)
		}
	}
	if err := gw1.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var tl tally
	select {
	case tl = <-readDone:
	case <-time.After(30 * time.Second):
		t.Fatal("gw1's stdout did not close within 30 s of SIGTERM")
	}
	allOK(t, append(blocked, drained...), time.Now())
	sent := gated(blocked) + gated(drained)
	if tl.lines+tl.dropped != sent {
		t.Errorf("%d lines written + %d counted in log_dropped = %d, want the %d gated calls", tl.lines, tl.dropped,
			tl.lines+tl.dropped, sent)
	}
	if tl.dropped == 0 {
		t.Errorf("no line was dropped: the pipe never filled (%d lines)", tl.lines)
	}
	// A sink that held calls up would bring them to a near stop once the
	// pipe and the queue filled; half the drained rate leaves room for the
	// noise of a shared 2-core machine.
	if rate(blocked, phase) < 0.5*rate(drained, phase) {
		t.Errorf("calls/s with the sink blocked %.1f, drained %.1f: a blocked sink slowed calls", rate(blocked, phase), rate(drained, phase))
	}
	if p, q := percentile(base, 99), percentile(after, 99); p > q+200*time.Millisecond {
		t.Errorf("p99 gateway overhead with the sink blocked %v, drained %v", p, q)
	}
	// Shutdown with the sink blocked for good: ≤ 3 s.
	res2 := runLoad(ctx, loadSpec{Gateways: r.urls(gw2), Clients: 24, Duration: phase / 2, Users: loadUsers})
	allOK(t, res2, time.Now())
	termAt := time.Now()
	if err := gw2.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gw2.done:
	case <-time.After(20 * time.Second):
		t.Fatal("gw2 did not exit within 20 s of SIGTERM with its stdout blocked")
	}
	exit := time.Since(termAt)
	if exit > 3*time.Second {
		t.Errorf("gw2 took %v to exit with its log sink blocked, want ≤ 3 s", exit)
	}
	figures("24 clients on a gateway whose stdout is a pipe nobody reads: %.0f calls/s, p99 overhead %v (drained: %.0f calls/s, p99 %v); %d gated calls = %d lines + %d in log_dropped; exit on SIGTERM with the pipe still blocked after %d calls: %v",
		rate(blocked, phase), percentile(base, 99).Round(time.Millisecond), rate(drained, phase),
		percentile(after, 99).Round(time.Millisecond), sent, tl.lines, tl.dropped, len(res2), exit.Round(time.Millisecond))
}
