// Package loadgen drives a capgate gateway (or any API with the same
// contract) with simulated users: under the built-in policy, Mapper users
// running Auto Match-like jobs (batches of rows, single-row lookups,
// reranks); under any other policy, users sending calls synthesized from
// the policy's routes (WorkloadRoutes); or a fixed number of bulk calls,
// through one of three clients (the capacity-aware one, a plain one that
// never retries, one that follows the Mapper's Retry-After rules), and the
// run ends with a report per user and tier: rows done, Jain's fairness
// index, 429s, and how busy the bottleneck lane was kept.
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
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

// User is one simulated user.
type User struct {
	Name  string // the username, as the API knows it
	Token string // sent as Authorization: <scheme> <token>, the policy's identity scheme
	Tier  string // for the report (and the client's tier pauses)
	// Workers and Calls override Config.Workers and Config.Calls for this
	// user (0: the config's), e.g. for one heavy user among light ones.
	Workers, Calls int
}

// Config says what load to send. Zero values mean the defaults.
type Config struct {
	BaseURL string // the gateway, e.g. http://127.0.0.1:8080 (required)
	// Policy is the gateway's policy, whose names (headers, metadata),
	// identity scheme and lanes the users send and read, and whose routes
	// they call (Workload). Default: the built-in policy.
	Policy *policy.Policy
	// Workload is what users send: WorkloadMapper (the Mapper's jobs; the
	// built-in policy's routes) or WorkloadRoutes (each job one call of a
	// route of the policy picked at random, synthesized so the route
	// matches it: its method; a concrete path, a pattern's {name} filled
	// from Values; the query parameters its query_truthy predicates need,
	// and each other query flag half the time; the headers of its
	// header_present predicates and header fields; a JSON body whose keys
	// make its body predicates hold, a body_string field from Values and a
	// body_array_len field an array of BulkRows items). Default:
	// WorkloadMapper under the built-in policy, WorkloadRoutes under any
	// other (WorkloadOf). In the routes workload a call counts for its
	// route's units (policy units) as rows, 1 without them; it is
	// Interactive when it is of a class a lane keeps room for, else Bulk;
	// and the client is told the lanes it takes (Call.Lanes).
	Workload string
	// Values are the values a synthesized string field (body_string,
	// header, path_segment, or a pattern's {name}) takes, by field name:
	// the first most often, each next one half as often as the one before,
	// so a lane keyed by the field fills up. Default: DefaultValues.
	Values map[string][]string
	// MoreURLs are further gateways; user i sends to the (i mod n)th of
	// BaseURL and these.
	MoreURLs []string
	// Client picks the client: ClientAware (default), ClientPlain or
	// ClientRetryAfter.
	Client string
	// Calls, when > 0, is a fixed workload instead of the job mix: each
	// user sends exactly Calls bulk semantic $match calls of BulkRows[0]
	// rows (in the routes workload, calls of the first route, each string
	// field its first value, each array BulkRows[0] long, each query flag
	// set) through its Workers, and the run ends when all are answered (or
	// at Duration + Grace). The report then has each user's finish time.
	Calls int
	// BottleneckLimit is the limit of the lane every call takes that binds
	// first (e.g. api_heavy_task's per_task); with it the report gives the
	// lane's utilization. 0: not reported.
	BottleneckLimit int
	// SimStatsURL, when set, is an upstream's stats endpoint (capgate
	// simapi's /_simapi/stats): the busy time is then the API's own summed
	// call time, read before and after the run, instead of what the client
	// saw.
	SimStatsURL string
	Users       []User        // required
	Duration    time.Duration // how long users start new work (default 30 s)
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
	// Transport carries every user's calls with ClientAware (default
	// client.NewTransport(nil)); its Base is wrapped to count 429s and busy
	// time.
	// One client for all users is deliberate: its pauses per scope and its
	// oldest-first retry order are what keep users of a tier from starving
	// one another. Independent clients per user, with no queue on the
	// server, let whoever finishes a call first take the freed slot again
	// (see docs/CLIENT.md).
	Transport *client.Transport
	// Mix is the share of jobs of each kind (default 0.6 Auto Match runs,
	// 0.25 single-row lookups, 0.15 reranks).
	Mix Mix
	// BulkRows is the range of rows in a bulk call, and of items in a
	// synthesized body array (default 10 to 50).
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
	urls := append([]string{cfg.BaseURL}, cfg.MoreURLs...)
	for _, s := range urls {
		if base, err := url.Parse(s); err != nil || base.Host == "" {
			return nil, fmt.Errorf("loadgen: base URL %q: want an absolute http(s) URL", s)
		}
	}
	switch cfg.Client {
	case "":
		cfg.Client = ClientAware
	case ClientAware, ClientPlain, ClientRetryAfter:
	default:
		return nil, fmt.Errorf("loadgen: client %q: want %s, %s or %s", cfg.Client, ClientAware, ClientPlain, ClientRetryAfter)
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
	if cfg.Policy == nil {
		cfg.Policy = policy.OCL()
	}
	cfg.Workload = WorkloadOf(cfg)
	switch cfg.Workload {
	case WorkloadMapper:
		if cfg.Policy.RouteByLogName(KindRerank) == nil || cfg.Policy.RouteByLogName("$match") == nil {
			return nil, fmt.Errorf("loadgen: the %s workload sends the built-in policy's $match and $rerank; policy %s has none: use the %s workload",
				WorkloadMapper, cfg.Policy.Name, WorkloadRoutes)
		}
	case WorkloadRoutes:
	default:
		return nil, fmt.Errorf("loadgen: workload %q: want %s or %s", cfg.Workload, WorkloadMapper, WorkloadRoutes)
	}
	names := cfg.Policy.Names.Header()
	if cfg.Transport == nil {
		cfg.Transport = client.NewTransport(nil)
	}
	if cfg.Transport.Names == (header.Names{}) {
		cfg.Transport.Names = names // the gateway's, not the client's generic default
	}
	// The lanes keyed by the caller and by the tier, which the client
	// pauses per user and per tier.
	for _, l := range cfg.Policy.Lanes {
		switch {
		case l.ByUser() && cfg.Transport.UserLane == "":
			cfg.Transport.UserLane = l.Name
		case l.ByTier() && cfg.Transport.TierLane == "":
			cfg.Transport.TierLane = l.Name
		}
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 256 // every worker keeps its connection
	m := &meter{base: base, decision: names.Decision}
	if cfg.Transport.Base != nil {
		m.base = cfg.Transport.Base
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
	r := &run{cfg: cfg, meter: m, kinds: Kinds(cfg)}
	if cfg.Workload == WorkloadRoutes {
		s, err := newSynth(cfg.Policy, cfg.Values, cfg.BulkRows)
		if err != nil {
			return nil, err
		}
		r.synth = s
	}
	if cfg.Client == ClientAware {
		cfg.Transport.Base = m
		r.hc = &http.Client{Transport: cfg.Transport}
	} else {
		r.hc = &http.Client{Transport: m}
	}
	r.users = make([]*userRun, len(cfg.Users))
	for i, u := range cfg.Users {
		r.users[i] = &userRun{User: u, base: strings.TrimSuffix(urls[i%len(urls)], "/"), lat: map[string][]time.Duration{}}
		r.users[i].left = or(u.Calls, cfg.Calls)
	}
	if cfg.SimStatsURL != "" {
		b, err := simBusy(ctx, cfg.SimStatsURL)
		if err != nil {
			return nil, err
		}
		r.simBefore = b
	}
	r.start = time.Now()
	// New work stops at the end of Duration; what runs then gets Grace.
	stopNew, cancelNew := context.WithTimeout(ctx, cfg.Duration)
	defer cancelNew()
	calls, cancelCalls := context.WithTimeout(ctx, cfg.Duration+cfg.Grace)
	defer cancelCalls()

	var wg sync.WaitGroup
	for i, u := range r.users {
		for w := range or(u.Workers, cfg.Workers) {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i*100+w)))
			if cfg.Calls > 0 {
				wg.Go(func() { r.workCalls(calls, u, rng) })
			} else {
				wg.Go(func() { r.work(stopNew, calls, u, rng) })
			}
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
	r.end = time.Now()
	close(done)
	reporter.Wait() // no progress call may run after Run returns
	if cfg.SimStatsURL != "" {
		b, err := simBusy(ctx, cfg.SimStatsURL)
		if err != nil {
			return nil, err
		}
		r.simAfter = b
	}
	return r.report(), nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

type run struct {
	cfg                 Config
	hc                  *http.Client
	meter               *meter
	kinds               []string // Kinds(cfg)
	synth               *synth   // WorkloadRoutes
	start, end          time.Time
	simBefore, simAfter time.Duration
	users               []*userRun
}

type userRun struct {
	User
	base string  // the gateway this user sends to
	gate tabGate // ClientRetryAfter's per-tab gate

	mu        sync.Mutex
	left      int           // calls still to send (Config.Calls)
	finish    time.Duration // when the user's last successful call ended, from the run's start
	calls     int
	done      int // rows
	throttled int
	failed    int
	cancelled int
	waited    time.Duration
	lat       map[string][]time.Duration
	errs      []string
}

// workCalls runs one of a user's workers in a fixed workload: bulk
// semantic calls until the user's are all sent.
func (r *run) workCalls(ctx context.Context, u *userRun, rng *rand.Rand) {
	for ctx.Err() == nil {
		u.mu.Lock()
		if u.left <= 0 {
			u.mu.Unlock()
			return
		}
		u.left--
		u.mu.Unlock()
		if r.synth != nil {
			_ = r.send(ctx, u, rng, r.synth.call(r.cfg.Policy.Routes[0], rng, true))
			continue
		}
		_ = r.send(ctx, u, rng, r.mapperCall(KindBulk, r.cfg.BulkRows[0], true, false))
	}
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
		if r.synth != nil { // one call of a route
			routes := r.cfg.Policy.Routes
			r.call(stopNew, calls, u, rng, r.synth.call(routes[rng.IntN(len(routes))], rng, false))
			continue
		}
		switch p := rng.Float64(); {
		case p < r.cfg.Mix.Bulk: // an Auto Match run: a few batches of rows
			semantic := rng.Float64() < 0.7
			for range 2 + rng.IntN(4) {
				if stopNew.Err() != nil {
					return
				}
				lo, hi := r.cfg.BulkRows[0], r.cfg.BulkRows[1]
				r.call(stopNew, calls, u, rng, r.mapperCall(KindBulk, lo+rng.IntN(hi-lo+1), semantic, rng.Float64() < 0.5))
			}
		case p < r.cfg.Mix.Bulk+r.cfg.Mix.Single: // a person looking up one row
			r.call(stopNew, calls, u, rng, r.mapperCall(KindSingle, 1, true, false))
		default:
			r.call(stopNew, calls, u, rng, r.mapperCall(KindRerank, 5+rng.IntN(26), false, false))
		}
	}
}

// call sends one call and records how it went. After a throttled call
// (the server's wait outlasted the budget or the run) the worker waits out
// that pause before its next call, as a person would, instead of looping;
// the wait ends with stopNew.
func (r *run) call(stopNew, ctx context.Context, u *userRun, rng *rand.Rand, spec callSpec) {
	err := r.send(ctx, u, rng, spec)
	if !errors.Is(err, client.ErrThrottled) {
		return
	}
	te, _ := errors.AsType[*client.ThrottledError](err)
	until := time.Now().Add(time.Second)
	if te != nil {
		until = te.Until
	}
	t := time.NewTimer(max(time.Until(until), time.Second))
	defer t.Stop()
	select {
	case <-t.C:
	case <-stopNew.Done():
	}
}

// mapperCall returns a call of the Mapper: a $match of rows rows (with
// the semantic and reranker flags; a lexical one always with the
// reranker), or a $rerank.
func (r *run) mapperCall(kind string, rows int, semantic, reranker bool) callSpec {
	var b strings.Builder
	b.WriteString(`{"rows":[`)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"concept %d"}`, i)
	}
	b.WriteString("]")
	spec := callSpec{kind: kind, method: http.MethodPost, units: rows, call: client.Call{Lanes: r.lanes(kind, semantic)},
		aware: kind == KindBulk && semantic}
	switch kind {
	case KindRerank:
		spec.target = "/concepts/$rerank/"
		b.WriteString(`,"q":"malaria"}`)
	default:
		q := url.Values{}
		if semantic {
			q.Set("semantic", "true")
		}
		if reranker || !semantic {
			q.Set("reranker", "true")
		}
		spec.target = "/concepts/$match/?" + q.Encode()
		b.WriteString("}")
		if kind == KindSingle {
			spec.call.Class = client.Interactive
		}
	}
	spec.body = []byte(b.String())
	return spec
}

// send sends one call and records how it went.
func (r *run) send(ctx context.Context, u *userRun, rng *rand.Rand, spec callSpec) error {
	cc := spec.call
	cc.User, cc.Tier = u.Name, u.Tier
	var res client.Result
	cc.Result = &res
	kind, rows := spec.kind, spec.units
	newReq := func() (*http.Request, error) {
		rctx := ctx
		if r.cfg.Client == ClientAware {
			rctx = client.WithCall(ctx, cc)
		}
		req, err := http.NewRequestWithContext(rctx, spec.method, u.base+spec.target, bytes.NewReader(spec.body))
		if err != nil {
			return nil, err
		}
		for k, vs := range spec.header {
			req.Header[k] = vs
		}
		req.Header.Set("Authorization", r.cfg.Policy.Identity.Scheme+" "+u.Token)
		req.Header.Set("Content-Type", "application/json")
		names := r.cfg.Policy.Names
		if names.RequestSourceHeader != "" {
			req.Header.Set(names.RequestSourceHeader, "loadgen")
		}
		if r.cfg.Client == ClientRetryAfter && spec.aware && names.MetadataHeader != "" {
			// The Mapper declares its bulk semantic $match capacity-aware;
			// a synthesized call is declared so always.
			req.Header.Set(names.MetadataHeader, `{"`+names.AwareField+`":"true"}`)
		}
		return req, nil
	}
	began := time.Now()
	var err error
	switch r.cfg.Client {
	case ClientPlain:
		var status int
		if status, err = r.sendPlain(newReq); err == nil {
			err = statusError(kind, status)
		}
	case ClientRetryAfter:
		var status int
		status, res.Waited, err = r.sendRetryAfter(ctx, u, rng, newReq)
		if err == nil {
			err = statusError(kind, status)
		}
	default:
		var req *http.Request
		if req, err = newReq(); err != nil {
			break
		}
		var resp *http.Response
		if resp, err = r.hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = statusError(kind, resp.StatusCode)
		}
	}
	u.record(kind, rows, time.Since(began), time.Since(r.start), res, err)
	return err
}

func (u *userRun) record(kind string, rows int, d, at time.Duration, res client.Result, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	u.waited += res.Waited
	switch {
	case err == nil:
		u.done += rows
		u.finish = max(u.finish, at)
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

// lanes returns the lanes of the policy a call of kind takes (for the
// client's pauses): the lanes of its route, those with only_if taken only
// by a semantic call.
func (r *run) lanes(kind string, semantic bool) []string {
	route := r.cfg.Policy.RouteByLogName("$match")
	if kind == KindRerank {
		route = r.cfg.Policy.RouteByLogName("$rerank")
	}
	if route == nil {
		return nil
	}
	var out []string
	for _, l := range r.cfg.Policy.LanesOf(route) {
		if l.OnlyIf == "" || semantic {
			out = append(out, l.Name)
		}
	}
	return out
}
