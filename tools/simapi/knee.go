package simapi

import (
	"slices"
	"time"
)

// Knee makes the whole API behave like a service of limited capacity, as a
// real API's workers and shared backend do: up to Capacity heavy calls at
// once each take their usual time; past it every call is slower in
// proportion (Latency × n / Capacity, n being the heavy calls running when
// it starts, itself included), and a call that finds more than FailAt
// running fails with 503 (after FailAfter) as an overloaded API times out
// or sheds load. It is what the demo shows: what overload does in shadow,
// and a gateway holding the API at its knee in enforce.
//
// Slowing in proportion alone keeps the API's throughput flat past the
// knee (n calls, each n/Capacity times slower), so capping it gains no
// throughput. Real backends past their knee lose throughput: a kNN search
// whose working set fits its caches for Capacity queries evicts the
// others' pages with every query past it, and a client's timeout throws
// away work the API finished. Thrash models both (thrash.go): the API then
// shares its capacity among the calls running, as a CPU or a search node
// does, the ones it will fail past FailAt included until they fail — each call's work advances at Capacity / n of full speed, further
// divided by 1 + Thrash × (n − Capacity) / Capacity past the knee,
// recomputed whenever a call starts or ends — so the API's throughput past
// the knee is Capacity / (1 + Thrash × (n − Capacity) / Capacity) calls'
// worth, where slowing in proportion alone kept all of it: with Thrash 2
// (the demo's), at twice the knee each call takes 6 times its time and the
// API does a third of its best.
type Knee struct {
	Capacity  int           // calls at once at the usual time (at least 1)
	FailAt    int           // past this many at once a call fails; 0: never
	FailAfter time.Duration // how long a failing call takes (default 1 s)
	// Thrash is how much each call past the knee slows every call running
	// (see above). Default 0: slower in proportion only, judged when a
	// call starts.
	Thrash float64

	share sharing // the calls sharing the API's capacity, with Thrash
}

// overloaded is the 503 body of a call the knee failed.
const overloaded = `{"detail":"The API is overloaded: too many calls at once."}`

// slow returns d stretched for n calls at once.
func (k *Knee) slow(d time.Duration, n int) time.Duration {
	if c := max(k.Capacity, 1); n > c {
		return time.Duration(float64(d) * float64(n) / float64(c))
	}
	return d
}

// fails reports whether a call that finds n calls running (itself
// included) fails.
func (k *Knee) fails(n int) bool { return k.FailAt > 0 && n > k.FailAt }

func (k *Knee) failAfter() time.Duration {
	if k.FailAfter > 0 {
		return k.FailAfter
	}
	return time.Second
}

// Window is what the API saw between two calls of TakeWindow: the heavy
// calls that ended (served or failed by the knee), the most at once, and
// the served calls' time in the API.
type Window struct {
	Served, Failed int
	Peak           int
	P50, P95       time.Duration
}

// maxWindowSamples bounds the call times a window keeps.
const maxWindowSamples = 1 << 20

// window is the running Window; requires the API's mu held.
type window struct {
	served, failed, peak int
	times                []time.Duration
}

// TakeWindow returns what the API saw since the last call (or its start)
// and starts a new window, whose peak starts at the calls running now.
func (a *API) TakeWindow() Window {
	a.mu.Lock()
	w := a.win
	a.win = window{peak: a.stats.InFlight}
	a.mu.Unlock()
	return w.result()
}

// result returns the Window w recorded. It sorts w's times.
func (w window) result() Window {
	slices.Sort(w.times)
	out := Window{Served: w.served, Failed: w.failed, Peak: w.peak}
	if n := len(w.times); n > 0 {
		out.P50, out.P95 = w.times[(n-1)*50/100], w.times[(n-1)*95/100]
	}
	return out
}

// end records a heavy call that ended after took, failed by the knee or
// served.
func (w *window) end(took time.Duration, failed bool) {
	if failed {
		w.failed++
		return
	}
	w.served++
	if len(w.times) < maxWindowSamples {
		w.times = append(w.times, took)
	}
}

// Load returns the heavy calls running now and those the knee failed so
// far.
func (a *API) Load() (inFlight, failed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.InFlight, a.stats.Failed
}
