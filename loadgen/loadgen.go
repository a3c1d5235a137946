// Package loadgen drives a capgate gateway (or any API with the same
// contract) with simulated Mapper users: each runs Auto Match-like jobs
// (batches of rows, single-row lookups, reranks) through the
// capacity-aware client, and the run ends with a report per user and tier.
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/client"
)

// User is one simulated user.
type User struct {
	Name  string // the username, as the API knows it
	Token string // sent as Authorization: Token <token>
	Tier  string // for the report (and the client's tier pauses)
}

// Config says what load to send. Zero values mean the defaults.
type Config struct {
	BaseURL  string        // the gateway, e.g. http://127.0.0.1:8080 (required)
	Users    []User        // required
	Duration time.Duration // how long users start new work (default 30 s)
	// Workers is how many calls each user keeps going at once, like the
	// Mapper's per-tab concurrency (default 3); the client lowers it to the
	// gateway's suggested concurrency.
	Workers int
	// Think is the mean pause a user takes between jobs (a person reading
	// results); 0 means none: jobs back to back.
	Think time.Duration
	// Grace is how long calls still running (or waiting out a refusal) at
	// the end may take before they are cancelled (default 20 s).
	Grace time.Duration
	// Transport carries every user's calls (default client.NewTransport(nil)).
	// One client for all users is deliberate: its pauses per scope and its
	// oldest-first retry order are what keep users of a tier from starving
	// one another. Independent clients per user, with no queue on the
	// server, let whoever finishes a call first take the freed slot again
	// (see docs/CLIENT.md).
	Transport *client.Transport
	// Mix is the share of jobs of each kind (default 0.6 Auto Match runs,
	// 0.25 single-row lookups, 0.15 reranks).
	Mix Mix
	// BulkRows is the range of rows in a bulk call (default 10 to 50).
	BulkRows [2]int
	// Seed makes the job mix repeatable (default 1).
	Seed uint64
}

// Mix is the share of each kind of job; the shares are normalized.
type Mix struct {
	Bulk, Single, Rerank float64
}

// Endpoint kinds in the report.
const (
	KindBulk   = "bulk $match"
	KindSingle = "single-row $match"
	KindRerank = "$rerank"
)

// Run sends the load and returns the report. progress, if not nil, is
// called with a running count roughly every second.
func Run(ctx context.Context, cfg Config, progress func(Progress)) (*Report, error) {
	if cfg.BaseURL == "" || len(cfg.Users) == 0 {
		return nil, errors.New("loadgen: set BaseURL and at least one user")
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("loadgen: base URL %q: want an absolute http(s) URL", cfg.BaseURL)
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 20 * time.Second
	}
	if cfg.Transport == nil {
		cfg.Transport = client.NewTransport(nil)
	}
	if cfg.Mix.Bulk < 0 || cfg.Mix.Single < 0 || cfg.Mix.Rerank < 0 {
		return nil, errors.New("loadgen: job shares can't be negative")
	}
	if sum := cfg.Mix.Bulk + cfg.Mix.Single + cfg.Mix.Rerank; sum == 0 {
		cfg.Mix = Mix{Bulk: 0.6, Single: 0.25, Rerank: 0.15}
	} else {
		cfg.Mix = Mix{Bulk: cfg.Mix.Bulk / sum, Single: cfg.Mix.Single / sum, Rerank: cfg.Mix.Rerank / sum}
	}
	if cfg.BulkRows[0] <= 0 || cfg.BulkRows[1] < cfg.BulkRows[0] {
		cfg.BulkRows = [2]int{10, 50}
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	r := &run{cfg: cfg, hc: &http.Client{Transport: cfg.Transport}, start: time.Now()}
	r.users = make([]*userRun, len(cfg.Users))
	for i, u := range cfg.Users {
		r.users[i] = &userRun{User: u, lat: map[string][]time.Duration{}}
	}
	// New work stops at the end of Duration; what runs then gets Grace.
	stopNew, cancelNew := context.WithTimeout(ctx, cfg.Duration)
	defer cancelNew()
	calls, cancelCalls := context.WithTimeout(ctx, cfg.Duration+cfg.Grace)
	defer cancelCalls()

	var wg sync.WaitGroup
	for i, u := range r.users {
		for w := range cfg.Workers {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i*100+w)))
			wg.Go(func() { r.work(stopNew, calls, u, rng) })
		}
	}
	done := make(chan struct{})
	var reporter sync.WaitGroup
	if progress != nil {
		reporter.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					progress(r.progress())
				}
			}
		})
	}
	wg.Wait()
	close(done)
	reporter.Wait() // no progress call may run after Run returns
	return r.report(), nil
}

type run struct {
	cfg   Config
	hc    *http.Client
	start time.Time
	users []*userRun
}

type userRun struct {
	User
	mu        sync.Mutex
	calls     int
	done      int // rows
	throttled int
	failed    int
	cancelled int
	waited    time.Duration
	lat       map[string][]time.Duration
	errs      []string
}

// work runs one of a user's workers: jobs until stopNew ends.
func (r *run) work(stopNew, calls context.Context, u *userRun, rng *rand.Rand) {
	for stopNew.Err() == nil {
		if r.cfg.Think > 0 {
			d := time.Duration(rng.ExpFloat64() * float64(r.cfg.Think))
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-stopNew.Done():
				t.Stop()
				return
			}
		}
		switch p := rng.Float64(); {
		case p < r.cfg.Mix.Bulk: // an Auto Match run: a few batches of rows
			semantic := rng.Float64() < 0.7
			for range 2 + rng.IntN(4) {
				if stopNew.Err() != nil {
					return
				}
				lo, hi := r.cfg.BulkRows[0], r.cfg.BulkRows[1]
				r.call(stopNew, calls, u, KindBulk, lo+rng.IntN(hi-lo+1), semantic, rng.Float64() < 0.5)
			}
		case p < r.cfg.Mix.Bulk+r.cfg.Mix.Single: // a person looking up one row
			r.call(stopNew, calls, u, KindSingle, 1, true, false)
		default:
			r.call(stopNew, calls, u, KindRerank, 5+rng.IntN(26), false, false)
		}
	}
}

// call sends one call and records how it went. After a throttled call
// (the server's wait outlasted the budget or the run) the worker waits out
// that pause before its next call, as a person would, instead of looping;
// the wait ends with stopNew.
func (r *run) call(stopNew, ctx context.Context, u *userRun, kind string, rows int, semantic, reranker bool) {
	err := r.send(ctx, u, kind, rows, semantic, reranker)
	var te *client.ThrottledError
	if !errors.As(err, &te) {
		return
	}
	t := time.NewTimer(max(time.Until(te.Until), time.Second))
	defer t.Stop()
	select {
	case <-t.C:
	case <-stopNew.Done():
	}
}

func (r *run) send(ctx context.Context, u *userRun, kind string, rows int, semantic, reranker bool) error {
	var path, body string
	var b strings.Builder
	b.WriteString(`{"rows":[`)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"concept %d"}`, i)
	}
	b.WriteString("]")
	cc := client.Call{User: u.Name, Tier: u.Tier, Semantic: semantic}
	switch kind {
	case KindRerank:
		path = "/concepts/$rerank/"
		b.WriteString(`,"q":"malaria"}`)
	default:
		q := url.Values{}
		if semantic {
			q.Set("semantic", "true")
		}
		if reranker || !semantic {
			q.Set("reranker", "true")
		}
		path = "/concepts/$match/?" + q.Encode()
		b.WriteString("}")
		if kind == KindSingle {
			cc.Class = client.Interactive
		}
	}
	body = b.String()
	var res client.Result
	cc.Result = &res
	req, err := http.NewRequestWithContext(client.WithCall(ctx, cc), http.MethodPost,
		strings.TrimSuffix(r.cfg.BaseURL, "/")+path, bytes.NewReader([]byte(body)))
	if err != nil {
		u.record(kind, rows, 0, res, err)
		return err
	}
	req.Header.Set("Authorization", "Token "+u.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OCL-Request-Source", "loadgen")
	began := time.Now()
	resp, err := r.hc.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			err = fmt.Errorf("%s: HTTP %d", kind, resp.StatusCode)
		}
	}
	u.record(kind, rows, time.Since(began), res, err)
	return err
}

func (u *userRun) record(kind string, rows int, d time.Duration, res client.Result, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	u.waited += res.Waited
	switch {
	case err == nil:
		u.done += rows
		u.lat[kind] = append(u.lat[kind], d)
	case errors.Is(err, client.ErrThrottled):
		u.throttled += rows
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		u.cancelled += rows
	default:
		u.failed += rows
		if len(u.errs) < 5 {
			u.errs = append(u.errs, err.Error())
		}
	}
}
