//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowBody sends body in small pieces, pausing between them, until ctx ends.
type slowBody struct {
	ctx  context.Context
	rest string
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.rest == "" {
		return 0, io.EOF
	}
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-time.After(100 * time.Millisecond):
	}
	n := copy(p[:min(len(p), 8)], b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func TestS07ClientsAbort(t *testing.T) {
	figures := begin(t, 7)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s07", Config: roomyConfig(), Env: faultEnv})
	const calls, atOnce = 200, 40
	maxAbort := duration(3*time.Second, 1500*time.Millisecond)
	// Each call is held this long upstream, past its client's abort: an
	// admitted call's upstream request is not cancelled when its client
	// hangs up (the lease is held until the upstream has finished).
	hold := maxAbort + time.Second
	var (
		mu        sync.Mutex
		lastAbort time.Time
		aborted   int
		answered  int
		slow      int
		ids       []string
		wg        sync.WaitGroup
		sem       = make(chan struct{}, atOnce)
	)
	for i := range calls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			after := 20*time.Millisecond + mrand.N(maxAbort)
			if i%4 == 1 {
				// Early: while the gateway identifies the caller or takes the leases.
				after = mrand.N(40 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), after)
			defer cancel()
			gw := r.gws[i%len(r.gws)]
			user := loadUsers[mrand.IntN(len(loadUsers))]
			k := allKinds[mrand.IntN(len(allKinds))]
			var resErr error
			id := newID()
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			hdr := map[string]string{holdHeader: itoa(int(hold.Milliseconds())), "X-Request-ID": id}
			if i%4 == 3 {
				// A client that hangs up while still sending its body.
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url()+k.path,
					&slowBody{ctx: ctx, rest: k.body()})
				req.Header.Set("Authorization", "Token "+user+"-token")
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				req.ContentLength = int64(len(k.body()))
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				resErr = err
				mu.Lock()
				slow++
				mu.Unlock()
			} else {
				x := call(ctx, gw.url(), user, k, hdr)
				resErr = x.err
			}
			mu.Lock()
			defer mu.Unlock()
			if resErr != nil && (isCanceled(resErr) || strings.Contains(resErr.Error(), "canceled")) {
				aborted++
				if now := time.Now(); now.After(lastAbort) {
					lastAbort = now
				}
			} else {
				answered++
			}
		})
	}
	wg.Wait()
	// The upstream runs every call it got to its end.
	var upDoneAt time.Time
	if _, err := waitFor(context.Background(), hold+10*time.Second, 10*time.Millisecond, func() error {
		if now, _, _ := r.up.snapshot(); now.Total > 0 {
			return fmt.Errorf("%d calls still in the upstream", now.Total)
		}
		upDoneAt = time.Now()
		return nil
	}); err != nil {
		t.Errorf("after every client hung up: %v", err)
	}
	var emptyAt time.Time
	_, err := waitFor(context.Background(), 20*time.Second, 10*time.Millisecond, func() error {
		l, err := lanes(context.Background(), r.rc)
		if err != nil {
			return err
		}
		if len(l) > 0 {
			return fmt.Errorf("lanes: %s", laneSummary(l))
		}
		emptyAt = time.Now()
		return nil
	})
	emptyAfter := "not within 20 s"
	if err != nil {
		t.Errorf("lanes after %d aborts: %v", aborted, err)
		for _, g := range r.gws {
			logErrors(t, g)
		}
	} else {
		emptyAfter = emptyAt.Sub(upDoneAt).Round(time.Millisecond).String()
		if emptyAt.Sub(upDoneAt) > time.Second {
			t.Errorf("lanes empty %s after the upstream's last call ended, want ≤ 1 s", emptyAfter)
		}
	}
	if answered > 0 {
		t.Errorf("%d calls were answered; every call should have been aborted by its client", answered)
	}
	_, _, upCalls := r.up.snapshot()
	// Every call the upstream ran, it ran to the end, and its leases were
	// held at least that long.
	recs := map[string]logRecord{}
	for _, g := range r.gws {
		_, _ = waitFor(context.Background(), 3*time.Second, 50*time.Millisecond, func() error {
			if len(records(t, g)) == 0 {
				return fmt.Errorf("no lines yet")
			}
			return nil
		})
		for id, rec := range records(t, g) {
			recs[id] = rec
		}
	}
	ran, cut, short := 0, 0, 0
	for _, id := range ids {
		spent, ok := r.up.spentIn(id)
		if !ok {
			continue
		}
		ran++
		if spent < hold-50*time.Millisecond {
			cut++
		}
		if rec, ok := recs[id]; !ok || rec.HeldMS == nil || time.Duration(*rec.HeldMS+1)*time.Millisecond < spent {
			short++
		}
	}
	if cut > 0 || short > 0 {
		t.Errorf("of %d calls the upstream ran: %d cut short when their client left, %d held their leases less long than the upstream ran them", ran, cut, short)
	}
	// What the gateways logged: aborted acquires, skipped acquires and releases.
	canceled, skipped, relSkipped := 0, 0, 0
	for _, g := range r.gws {
		_, _ = waitFor(context.Background(), 3*time.Second, 50*time.Millisecond, func() error {
			if len(records(t, g)) == 0 {
				return fmt.Errorf("no lines yet")
			}
			return nil
		})
		for _, rec := range records(t, g) {
			switch {
			case strings.Contains(rec.Error, "canceled"):
				canceled++
			case strings.HasPrefix(rec.Error, "skipped"):
				skipped++
			case strings.HasPrefix(rec.Error, "release skipped"):
				relSkipped++
			}
		}
	}
	if skipped+relSkipped > 0 {
		t.Errorf("with Redis healthy, %d acquires and %d releases were skipped after %d client aborts during acquire: a client's abort is not a store error and must not open the skip window",
			skipped, relSkipped, canceled)
	}
	figures("3 gateways, %d calls (%d at once, %d hanging up mid-body) aborted by their clients after 0–%v while the upstream held them %v: %d aborted, %d reached the upstream, %d of them cut short, %d with leases held less long than the upstream ran them; every lane empty %s after the upstream's last call ended (bound 1 s); logged: %d acquires cut by the client, %d acquires and %d releases skipped as if Redis had failed",
		calls, atOnce, slow, maxAbort, hold, aborted, upCalls, cut, short, emptyAfter, canceled, skipped, relSkipped)
}
