package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// journalled counts the records of every journal in m (the hashes; a
// group's roster is a sorted set).
func journalled(m *miniredis.Miniredis) int {
	n := 0
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, "capgate:journal:") && m.Type(k) == "hash" {
			f, _ := m.HKeys(k)
			n += len(f)
		}
	}
	return n
}

// restartArgs returns serve's arguments for a gateway of task gw-a at a
// fixed address over api, with Redis lanes in m, and the tokens file's
// t-ann.
func restartArgs(t *testing.T, m *miniredis.Miniredis, api string) []string {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--listen", closedPort(t), "--upstream", api, "--database", "sqlite:" + filepath.Join(dir, "c.db"),
		"--identity", "tokens", "--tokens", tokens, "--mode", "shadow", "--redis", "redis://" + m.Addr() + "/0",
		"--task-id", "gw-a"}
}

// TestServeKilledAndRestartedReleasesItsCalls: capgate serve with Redis
// lanes, holding three calls, is killed (SIGKILL). Started again with the
// same task id at the same address and a long --restart-hold, it keeps
// them counted; killed within its hold, it leaves them to the next, which,
// with --restart-hold 300ms, releases them once the first one's liveness
// has lapsed and 300 ms after it starts, not lease_seconds later.
func TestServeKilledAndRestartedReleasesItsCalls(t *testing.T) {
	m := miniredis.RunT(t)
	api, started, _ := hangingAPI(t)
	args := restartArgs(t, m, api)
	first := startServeProcess(t, nil, args...)
	waitReady(first)
	for range 3 {
		startHeavy(t, first, started)
	}
	until(t, 10*time.Second, "the 3 calls journalled", func() bool { return journalled(m) == 3 })
	held := leasesHeld(m)
	if held == 0 {
		t.Fatal("no leases held")
	}
	first.signal(syscall.SIGKILL)
	first.exitCode(10 * time.Second)

	second := startServeProcess(t, nil, append(args, "--restart-hold", "1h")...)
	waitReady(second)
	if n := leasesHeld(m); n != held {
		t.Fatalf("%d lease entries within the hold, want the killed gateway's %d", n, held)
	}
	second.signal(syscall.SIGKILL)
	second.exitCode(10 * time.Second)
	if n := journalled(m); n != 3 {
		t.Fatalf("%d calls journalled after a kill within the hold, want the 3 still", n)
	}

	began := time.Now()
	third := startServeProcess(t, nil, append(args, "--restart-hold", "300ms")...)
	line := third.waitFor("released the calls a dead incarnation left held", 10*time.Second)
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("released %v after the start, want the hold (300ms) first", took)
	}
	if !strings.Contains(line, "calls=3") {
		t.Errorf("log line %q, want calls=3", line)
	}
	if n := leasesHeld(m); n != 0 {
		t.Errorf("%d lease entries after the hold, want 0", n)
	}
	until(t, 10*time.Second, "the journal emptied", func() bool { return journalled(m) == 0 })
	third.stop()
	if n := journalled(m); n != 0 {
		t.Errorf("%d calls journalled after a clean stop, want 0", n)
	}
}

// journalKeys returns the journals' keys in m, rosters included.
func journalKeys(m *miniredis.Miniredis) []string {
	var out []string
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, "capgate:journal:") {
			out = append(out, k)
		}
	}
	return out
}

// TestServeDrainingKeepsItsCalls: a gateway sent SIGTERM stops listening
// but still serves its calls. A successor of the same task id at the same
// address, with --restart-hold 0, never releases them while the old one
// lives (before, it released them as soon as it could listen: a limit-1
// user could run 2 calls at once); they are released as they end, and
// the old gateway's goodbye leaves nothing behind.
func TestServeDrainingKeepsItsCalls(t *testing.T) {
	m := miniredis.RunT(t)
	api, started, release := hangingAPI(t)
	args := restartArgs(t, m, api)
	first := startServeProcess(t, nil, append(args, "--shutdown-timeout", "5m")...)
	waitReady(first)
	calls := startHeavy(t, first, started)
	until(t, 10*time.Second, "the call journalled", func() bool { return journalled(m) == 1 })
	held := leasesHeld(m)
	first.signal(syscall.SIGTERM)
	first.waitFor("shutting down", 10*time.Second)
	addr := args[1]
	until(t, 10*time.Second, "the draining gateway's address free", func() bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		ln.Close()
		return true
	})

	second := startServeProcess(t, nil, append(args, "--restart-hold", "0")...)
	waitReady(second)
	second.waitFor("another incarnation of this journal's group is alive", 10*time.Second)
	if n := leasesHeld(m); n != held {
		t.Fatalf("%d lease entries with the draining gateway alive, want its call's %d", n, held)
	}
	release() // the call ends in its own time
	calls.Wait()
	if code := first.exitCode(30 * time.Second); code != 0 {
		t.Errorf("the draining gateway exited %d, want 0", code)
	}
	if n := leasesHeld(m); n != 0 {
		t.Errorf("%d lease entries after the call ended, want 0", n)
	}
	if line := second.Stderr(); strings.Contains(line, "released the calls a dead incarnation left held") {
		t.Errorf("the successor released calls:\n%s", line)
	}
	second.stop()
	if keys := journalKeys(m); len(keys) != 0 {
		t.Errorf("journal keys left after both stopped: %v", keys)
	}
}

// --restart-hold reads a duration or seconds, from the flag or
// CAPGATE_RESTART_HOLD, default 1s; a negative one refuses to start.
func TestRestartHoldFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want time.Duration
	}{
		{nil, "", time.Second},
		{[]string{"--restart-hold", "20s"}, "", 20 * time.Second},
		{[]string{"--restart-hold", "0"}, "", 0},
		{nil, "2.5", 2500 * time.Millisecond},
	} {
		cmd := &ServeCommand{Getenv: func(k string) string {
			if k == "CAPGATE_RESTART_HOLD" {
				return c.env
			}
			return ""
		}}
		o, err := cmd.parse(append([]string{"--upstream", "http://127.0.0.1:1"}, c.args...))
		if err != nil || o.RestartHold != c.want {
			t.Errorf("%v %q: %v (%v), want %v", c.args, c.env, o.RestartHold, err, c.want)
		}
	}
	cmd := &ServeCommand{Getenv: func(string) string { return "" }}
	if _, err := cmd.parse([]string{"--upstream", "http://127.0.0.1:1", "--restart-hold", "-1s"}); err == nil {
		t.Error("--restart-hold -1s: no error")
	}
}
