package bypass

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// Issue 12 rows 1 and 2 are fixed in the gate and the Redis store (the
// busy queue, local lanes, leases held until the upstream finishes), not in
// the request front; their attacks are here so the suite covers every row.

func TestHangUpHoldsTheLease(t *testing.T) {
	// Row 2: cora (limit 1) is admitted, her call runs upstream, and she
	// hangs up. The upstream keeps running it, so her next call must be
	// refused until it ends.
	r := getRig(t)
	mark := r.mark(t)
	addr := r.gateways[gwUpstream].addr
	// Held longer than the rig's wait (2 s), so the second call is
	// refused whether it waits or not.
	first := request{target: match, body: oneRow, headers: []string{r.token("cora"), jsonCT, "X-Test-Hold-Ms: 5000", "X-Test-Case: hang-up"}}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(first.raw())); err != nil {
		t.Fatal(err)
	}
	// Wait until the upstream runs it, then hang up.
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(r.runs(t)[mark:], func(h heavyRun) bool { return h.Case == "hang-up" }) {
		if time.Now().After(deadline) {
			t.Fatal("the first call never reached the upstream")
		}
		time.Sleep(10 * time.Millisecond) // another process's file: no event to wait on
	}
	conn.Close()
	second := request{target: match, body: oneRow, headers: []string{r.token("cora"), jsonCT, "X-Test-Case: after the hang-up"}}
	if got := send(t, addr, second.raw(), 1); !slices.Equal(got, []int{refused}) {
		t.Errorf("cora's call while her abandoned one still runs = %v, want 429", got)
	}
	r.checkInvariants(t, mark)
}

func TestFloodOnRedis(t *testing.T) {
	// Row 1: 400 calls at once from pam (limit 0) through a gateway whose
	// lanes are in Redis: a busy store queue must not let calls through
	// as "unavailable".
	url := os.Getenv("CAPGATE_TEST_REDIS_URL")
	if url == "" {
		t.Skip("CAPGATE_TEST_REDIS_URL is not set")
	}
	r := getRig(t)
	g := r.redisGateway(t, url)
	mark := r.mark(t)
	var wg sync.WaitGroup
	for range 400 {
		wg.Go(func() {
			q := request{target: match, body: oneRow, headers: []string{r.token("pam"), jsonCT, "X-Test-Hold-Ms: 200", "X-Test-Case: redis flood"}}
			send(t, g.addr, q.raw(), 1)
		})
	}
	wg.Wait()
	r.checkInvariants(t, mark)
}

// redisGateway starts (once) a fourth gateway, identity upstream, with its
// lanes in Redis under a key prefix of its own.
func (r *rig) redisGateway(t *testing.T, redisURL string) *gateway {
	t.Helper()
	if g := r.gateways["redis"]; g != nil {
		return g
	}
	db := "sqlite:" + filepath.Join(r.dir, "redis.db")
	set := append([]string{"capacity", "set", "--create"}, configArgs...)
	if out, err := run(t.Context(), r.dir, nil, r.bin, append(set, "--database", db)...); err != nil {
		t.Fatalf("configure: %v: %s", err, out)
	}
	addr, err := spareAddr()
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{id: "redis", addr: addr, logFile: filepath.Join(r.dir, "redis.log")}
	stderr := filepath.Join(r.dir, "redis.stderr")
	if err := r.spawn(r.dir, nil, stderr, r.bin, "serve", "--listen", addr, "--upstream", r.upstream,
		"--database", db, "--task-id", "bypass-redis", "--log-file", g.logFile, "--redis", redisURL,
		"--key-prefix", fmt.Sprintf("bypass-%d:capacity", os.Getpid()), "--shutdown-timeout", "2s"); err != nil {
		t.Fatal(err)
	}
	if err := waitHTTP(t.Context(), "http://"+addr+"/healthz", stderr); err != nil {
		t.Fatal(err)
	}
	r.gateways["redis"] = g
	return g
}
