//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/randhex"
)

// callKind is one kind of heavy call.
type callKind struct {
	name string
	path string // with query
	rows int
	q    bool // $rerank's "q"
}

var (
	bulkSemantic   = callKind{"bulk-semantic", "/concepts/$match/?semantic=true", 5, false}
	singleSemantic = callKind{"single-semantic", "/concepts/$match/?semantic=true", 1, false}
	bulkReranker   = callKind{"bulk-reranker", "/concepts/$match/?reranker=true", 3, false}
	rerank         = callKind{"rerank", "/concepts/$rerank/", 3, true}
	allKinds       = []callKind{bulkSemantic, singleSemantic, bulkReranker, rerank}
)

func (k callKind) body() string {
	rows := strings.TrimSuffix(strings.Repeat(`{"name":"malaria"},`, k.rows), ",")
	if k.q {
		return `{"q":"malaria","rows":[` + rows + `]}`
	}
	return `{"rows":[` + rows + `]}`
}

// result is what one client call saw.
type result struct {
	gw       int
	user     string
	kind     string
	id       string // X-Request-ID
	start    time.Time
	lat      time.Duration
	status   int
	decision string
	body     []byte
	header   http.Header
	err      error
}

// client is the suite's HTTP client: many connections, no proxy.
var client = &http.Client{Transport: &http.Transport{
	Proxy: nil, MaxIdleConns: 500, MaxIdleConnsPerHost: 200, IdleConnTimeout: 30 * time.Second,
	DisableCompression: true,
}}

func newID() string {
	return randhex.String(12)
}

// call sends one heavy call of kind as user to base and returns what it saw.
// hdr adds headers.
func call(ctx context.Context, base, user string, k callKind, hdr map[string]string) result {
	r := result{user: user, kind: k.name, id: newID(), start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+k.path, strings.NewReader(k.body()))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Token "+user+"-token")
	req.Header.Set("X-Request-ID", r.id)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		r.lat = time.Since(r.start)
		return r
	}
	r.body, r.err = io.ReadAll(resp.Body)
	resp.Body.Close()
	r.lat = time.Since(r.start)
	r.status = resp.StatusCode
	r.header = resp.Header
	r.decision = resp.Header.Get("X-OCL-Capacity-Decision")
	return r
}

// loadSpec is client load: Clients goroutines, each sending calls back to
// back to gateway i % len(Gateways) for Duration.
type loadSpec struct {
	Gateways []string
	Clients  int
	Duration time.Duration
	Users    []string
	Kinds    []callKind // default allKinds
	Header   map[string]string
	Timeout  time.Duration // per call; default 30 s
}

// runLoad runs the load and returns every call's result.
func runLoad(ctx context.Context, s loadSpec) []result {
	if len(s.Kinds) == 0 {
		s.Kinds = allKinds
	}
	if s.Timeout == 0 {
		s.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	for i := range s.Clients {
		wg.Go(func() {
			gw := i % len(s.Gateways)
			for ctx.Err() == nil {
				user := s.Users[mrand.IntN(len(s.Users))]
				k := s.Kinds[mrand.IntN(len(s.Kinds))]
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.Timeout)
				r := call(cctx, s.Gateways[gw], user, k, s.Header)
				ccancel()
				r.gw = gw
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.status != http.StatusOK {
					// Don't spin on refusals or errors: the machine is small.
					time.Sleep(20*time.Millisecond + mrand.N(30*time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	return out
}

// tally counts results by status and decision.
type tally struct {
	calls     int
	byStatus  map[int]int
	byDecided map[string]int
	errs      int
	firstErr  error
}

func count(rs []result) tally {
	t := tally{byStatus: map[int]int{}, byDecided: map[string]int{}}
	for _, r := range rs {
		t.calls++
		if r.err != nil {
			t.errs++
			if t.firstErr == nil {
				t.firstErr = r.err
			}
			continue
		}
		t.byStatus[r.status]++
		t.byDecided[r.decision]++
	}
	return t
}

func (t tally) String() string {
	var p []string
	for k, v := range t.byStatus {
		p = append(p, fmt.Sprintf("%d:%d", k, v))
	}
	var d []string
	for k, v := range t.byDecided {
		if k == "" {
			k = "(none)"
		}
		d = append(d, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(p)
	sort.Strings(d)
	return fmt.Sprintf("%d calls, status {%s}, decisions {%s}, %d transport errors", t.calls,
		strings.Join(p, " "), strings.Join(d, " "), t.errs)
}

// isCanceled reports whether err is the client's own cancellation.
func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// allOK reports every call that did not get a 200, times relative to ref.
func allOK(t testing.TB, res []result, ref time.Time) {
	t.Helper()
	bad := 0
	for _, x := range res {
		if x.err != nil || x.status != http.StatusOK {
			if bad++; bad <= 10 {
				t.Errorf("call %s on gw%d at %+.3fs: status %d err %v decision %q: want 200", x.id, x.gw+1,
					x.start.Sub(ref).Seconds(), x.status, x.err, x.decision)
			}
		}
	}
	if bad > 10 {
		t.Errorf("… %d calls in all did not get a 200", bad)
	}
}

// resumed returns, for the gateways 0..n-1, the longest time from at to
// the first call admitted (counted) on that gateway, and reports a gateway
// that never resumed or that went back to uncounted calls 2 s after.
func resumed(t testing.TB, res []result, n int, at time.Time) time.Duration {
	t.Helper()
	worst := time.Duration(0)
	for gw := range n {
		first := time.Time{}
		for _, x := range res {
			if x.gw == gw && x.start.After(at) && x.decision == "admitted" && (first.IsZero() || x.start.Before(first)) {
				first = x.start
			}
		}
		if first.IsZero() {
			t.Errorf("gw%d: no call admitted (counted) after the fault ended", gw+1)
			continue
		}
		worst = max(worst, first.Sub(at))
		for _, x := range res {
			if x.gw == gw && x.start.After(first.Add(2*time.Second)) && x.decision != "admitted" {
				t.Errorf("gw%d: call at %+.3fs is %q after counting resumed", gw+1, x.start.Sub(at).Seconds(), x.decision)
				break
			}
		}
	}
	return worst
}
