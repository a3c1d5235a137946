package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// journalled counts the records of every journal in m.
func journalled(m *miniredis.Miniredis) int {
	n := 0
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, "capgate:journal:") {
			f, _ := m.HKeys(k)
			n += len(f)
		}
	}
	return n
}

// TestServeKilledAndRestartedReleasesItsCalls: capgate serve with Redis
// lanes, holding three calls, is killed (SIGKILL). Started again with the
// same task id at the same address and a long --restart-hold, it keeps
// them counted; killed within its hold, it leaves them to the next, which,
// with --restart-hold 300ms, releases them 300 ms after it starts, not
// lease_seconds later.
func TestServeKilledAndRestartedReleasesItsCalls(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`[{"token":"t-ann","username":"ann","is_staff":false,"auth_groups":[]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	api, started, _ := hangingAPI(t)
	args := []string{"--listen", closedPort(t), "--upstream", api, "--database", "sqlite:" + filepath.Join(dir, "c.db"),
		"--identity", "tokens", "--tokens", tokens, "--mode", "shadow", "--redis", "redis://" + m.Addr() + "/0",
		"--task-id", "gw-a"}
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
	waitReady(second) // Recover has read the journal: it runs before serving
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
	third.waitFor("released the calls a previous gateway left held", 10*time.Second)
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Errorf("released %v after the start, want the hold (300ms) first", took)
	}
	if line := third.waitFor("released the calls", 0); !strings.Contains(line, "calls=3") {
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
