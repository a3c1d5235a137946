//go:build faults

package faults

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// window summarizes the calls that started in [from, to).
type window struct {
	calls, refused, failed int
	worst                  time.Duration // the most the gateway added to a call
}

func summarize(r *rig, res []result, from, to time.Time) window {
	var w window
	for _, x := range res {
		if x.start.Before(from) || !x.start.Before(to) {
			continue
		}
		w.calls++
		switch {
		case x.err != nil || (x.status != http.StatusOK && x.status != http.StatusTooManyRequests):
			w.failed++
		case x.status == http.StatusTooManyRequests:
			w.refused++
			w.worst = max(w.worst, x.lat)
		default:
			if a, ok := r.up.added(x); ok {
				w.worst = max(w.worst, a)
			}
		}
	}
	return w
}

func TestS09ConfigDatabase(t *testing.T) {
	figures := begin(t, 9)
	ctx := context.Background()
	// A PostgreSQL of this scenario's own: it gets locked and stopped.
	pg, err := startPostgres(ctx)
	if pg != nil {
		t.Cleanup(pg.remove)
	}
	if err != nil {
		t.Fatal(err)
	}
	db, err := pg.createDB(ctx, "s09")
	if err != nil {
		t.Fatal(err)
	}
	// Tight limits in enforce: with the config readable some calls are refused.
	cfg := []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=3", "api_heavy.per_task=2",
		"reserve_single_row=0", "es2_knn=3", "per_user.staff=1", "per_user.core=1", "per_user.early_access=1",
		"per_user.preview=1", "wait.max_seconds=0"}
	setConfig(t, db, cfg...)
	r := &rig{up: newUpstream(simapi.DemoUsers())}
	r.redis = startRedis(t)
	r.rc = r.redis.client(t)
	env := append([]string{"CAPACITY_CONFIG_READ_TIMEOUT_MS=500"}, faultEnv...)
	for i := range 2 {
		task := "gw" + itoa(i+1)
		r.gws = append(r.gws, startGateway(t, gwOptions{Task: task, Upstream: r.up.listen(t, task), Redis: r.redis.url(),
			Database: db, Env: env}))
	}
	const readTimeout = 500 * time.Millisecond
	settle := 2 * time.Second // the 1 s cache, a read timeout, and some
	phase := duration(6*time.Second, 4*time.Second)

	endProbes := watchProbes(t, r.gws)
	done := make(chan []result, 1)
	t0 := time.Now()
	go func() {
		done <- runLoad(ctx, loadSpec{Gateways: r.urls(), Clients: 8, Duration: 5*phase + settle, Users: loadUsers})
	}()
	time.Sleep(phase)
	// Lock the table for a phase.
	lockAt := time.Now()
	lockCtx, unlock := context.WithCancel(ctx)
	lock := exec.CommandContext(lockCtx, filepath.Join(pgBin, "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", itoa(pg.port),
		"-U", "postgres", "-d", "s09", "-c",
		"BEGIN; LOCK TABLE capacity_configs IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600); COMMIT;")
	lock.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	lock.Cancel = func() error { return syscall.Kill(-lock.Process.Pid, syscall.SIGKILL) }
	if err := lock.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(phase)
	// The lock may end from here on (the backend ends with its client, or
	// at the latest when terminated below): a read in flight then succeeds
	// at once, so the locked phase ends now, not after the terminate.
	unlockAt := time.Now()
	unlock()
	_ = lock.Wait()
	// The psql client is gone; end its backend (and the lock) at once.
	if _, err := pg.psql(ctx, "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()"); err != nil {
		t.Errorf("end the lock: %v", err)
	}
	time.Sleep(phase)
	stopAt := time.Now()
	pg.stop()
	time.Sleep(phase)
	startAt := time.Now()
	if err := pg.start(ctx); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	restartedAt := time.Now()
	res := <-done
	endProbes()

	before := summarize(r, res, t0, lockAt)
	locked := summarize(r, res, lockAt.Add(settle), unlockAt)
	lockedAll := summarize(r, res, lockAt, unlockAt)
	unlocked := summarize(r, res, unlockAt.Add(settle), stopAt)
	stopped := summarize(r, res, stopAt.Add(settle), startAt)
	stoppedAll := summarize(r, res, stopAt, startAt)
	back := summarize(r, res, restartedAt, restartedAt.Add(time.Hour))
	for name, w := range map[string]window{"before": before, "locked": lockedAll, "unlocked": unlocked, "stopped": stoppedAll, "back": back} {
		if w.failed > 0 {
			t.Errorf("%s: %d of %d calls failed", name, w.failed, w.calls)
		}
	}
	if before.refused == 0 || unlocked.refused == 0 {
		t.Errorf("enforce refused nothing with the config readable (before %d, after the lock %d): load too light?", before.refused, unlocked.refused)
	}
	if locked.refused > 0 || stopped.refused > 0 {
		t.Errorf("calls refused while the config could not be read (locked %d, stopped %d): enforce must fall back to shadow", locked.refused, stopped.refused)
	}
	if back.refused == 0 {
		t.Errorf("no call refused after PostgreSQL came back: the config (enforce) did not come back")
	}
	// The first refusal after the restart: the config is back.
	backIn := time.Duration(-1)
	for _, x := range res {
		if x.start.After(restartedAt) && x.status == http.StatusTooManyRequests && (backIn < 0 || x.start.Sub(restartedAt) < backIn) {
			backIn = x.start.Sub(restartedAt)
		}
	}
	slack := time.Second // a loaded 2-core machine
	for name, w := range map[string]window{"locked": lockedAll, "stopped": stoppedAll} {
		if w.worst > readTimeout+slack {
			t.Errorf("%s: a call waited %v on the gateway, want ≤ the read timeout %v (+%v)", name, w.worst, readTimeout, slack)
		}
	}
	figures("2 gateways, 8 clients, enforce with tight limits: refused %d/%d before; table locked ACCESS EXCLUSIVE %v: %d calls, %d refused after the cache ran out, worst wait %v; unlocked: %d/%d refused; PostgreSQL stopped %v: %d calls, %d failed, %d refused after the cache, worst wait %v; restarted: enforce back %v after (%d/%d refused) (read timeout 500 ms, cache 1 s)",
		before.refused, before.calls, phase, lockedAll.calls, locked.refused, lockedAll.worst.Round(time.Millisecond),
		unlocked.refused, unlocked.calls, phase, stoppedAll.calls, stoppedAll.failed, stopped.refused,
		stoppedAll.worst.Round(time.Millisecond), backIn.Round(time.Millisecond), back.refused, back.calls)
}
