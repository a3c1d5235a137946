// Package genlog writes realistic per-call logs for tests and benchmarks.
// It runs the real capgate.Gate over the real in-process lane store
// (memory.Store), both on a simulated clock, under a policy (default: the
// built-in OCL policy, whose lines are ocl_capacity lines): calls of the
// policy's routes arrive at random, hold their leases for a random time
// and end; each line is the one the gate writes. Outages make the store
// fail (through mock.LaneStore).
package genlog

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Options shape a generated log. The zero value gives a small shadow log.
type Options struct {
	Calls    int           // default 10000
	Start    time.Time     // when the first call may arrive; default 2026-01-01T00:00:00Z
	Rate     float64       // calls arriving per second (Poisson); default 3
	MeanHeld time.Duration // mean time a call runs (log-normal); default 1.5 s
	Users    int           // default 200; a few users make most calls
	Tasks    int           // gateways (API tasks), each with its own Gate; default 2
	// Policy is the policy the gates run, whose routes the calls are of.
	// Default: Config's policy when Config is set, else the built-in OCL
	// policy (policy.OCL()).
	Policy *policy.Policy
	// Config is the config in force, a config of Policy; default
	// settings.Default(Policy, shadow).
	Config *settings.Config
	// Aware is the share of calls that send capacity_aware; default 0.
	Aware float64
	// Outages are spans, from Start, during which the lane store fails.
	Outages []Outage
	// NoiseEvery writes a line that is not a call's line (a slog line, a
	// config change with log_dropped, or garbage) after every NoiseEvery
	// calls; 0: none.
	NoiseEvery int
	Seed       uint64
}

// Outage is a span of time during which the lane store fails.
type Outage struct {
	At, For time.Duration
}

// Stats says what Generate wrote.
type Stats struct {
	Lines     int              // every line written
	Calls     int              // call lines (OCL: ocl_capacity lines)
	Noise     int              // other lines
	Dropped   int64            // the sum of the log_dropped values written
	Decisions map[string]int64 // calls by decision
}

// running is a call in flight until end (simulated µs).
type running struct {
	end int64
	adm *capgate.Admission
}

type runHeap []running

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(running)) }
func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// sink writes each line the gates emit to w.
type sink struct {
	w     *bufio.Writer
	lines int
	err   error
}

func (s *sink) Emit(line []byte) error {
	if s.err != nil {
		return s.err
	}
	s.lines++
	if _, err := s.w.Write(line); err != nil {
		s.err = err
		return err
	}
	return s.w.WriteByte('\n')
}

// ErrPolicyMismatch is wrapped by Generate's error when Options.Config is
// a config of another policy than Options.Policy.
var ErrPolicyMismatch = errors.New("config of another policy")

// Generate writes a log of opts.Calls calls to w. It fails when w does or
// when ctx ends, the error wrapping the cause; and with ErrPolicyMismatch.
func Generate(ctx context.Context, w io.Writer, opts Options) (Stats, error) {
	opts = withDefaults(opts)
	if p := opts.Config.Policy(); p != opts.Policy {
		return Stats{}, fmt.Errorf("generate log: %w (%s, not %s)", ErrPolicyMismatch, p.Name, opts.Policy.Name)
	}
	mix := newCallMix(opts)
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	// Simulated µs since opts.Start. Atomic: a gate's background release
	// retries read the clock on their own goroutine.
	var nowUS atomic.Int64
	now := func() time.Time { return opts.Start.Add(time.Duration(nowUS.Load()) * time.Microsecond) }
	var isDown atomic.Bool
	store := outageStore(memory.New(now), &isDown)
	out := &sink{w: bufio.NewWriterSize(w, 256<<10)}
	cfg := settings.NewFixed(*opts.Config)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	gates := make([]*capgate.Gate, opts.Tasks)
	for i := range gates {
		g, err := capgate.NewGate(store, cfg, out, fmt.Sprintf("task-%d", i+1))
		if err != nil {
			return Stats{}, err
		}
		g.Now, g.Logger = now, quiet // the skip window follows the simulated clock too
		gates[i] = g
	}
	st := Stats{Decisions: map[string]int64{}}
	var inFlight runHeap
	finish := func(r running) {
		nowUS.Store(r.end)
		isDown.Store(down(opts.Outages, r.end))
		r.adm.Release(ctx)
		st.Decisions[string(r.adm.Outcome().Decision)]++
	}
	meanGapUS := 1e6 / opts.Rate
	mu := math.Log(float64(opts.MeanHeld.Microseconds())) - 0.32 // σ = 0.8: mean = e^(μ+σ²/2)
	next := int64(0)
	for i := range opts.Calls {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("generate log: %w", err)
			}
		}
		next += int64(rng.ExpFloat64()*meanGapUS) + 1
		for len(inFlight) > 0 && inFlight[0].end <= next {
			finish(heap.Pop(&inFlight).(running))
		}
		nowUS.Store(next)
		isDown.Store(down(opts.Outages, next))
		g := gates[rng.IntN(len(gates))]
		adm := g.Admit(ctx, mix.call(rng))
		if o := adm.Outcome(); o.Decision == capgate.DecisionRefused {
			adm.Release(ctx)
			st.Decisions[string(o.Decision)]++
		} else {
			held := int64(math.Exp(mu+0.8*rng.NormFloat64())) + 1
			heap.Push(&inFlight, running{end: next + held, adm: adm})
		}
		if opts.NoiseEvery > 0 && (i+1)%opts.NoiseEvery == 0 {
			st.Noise++
			st.Dropped += noise(out, rng, now(), opts.Config)
		}
		if out.err != nil {
			return st, fmt.Errorf("generate log: %w", out.err)
		}
	}
	for len(inFlight) > 0 {
		finish(heap.Pop(&inFlight).(running))
	}
	if err := out.w.Flush(); err != nil {
		return st, fmt.Errorf("generate log: %w", err)
	}
	if out.err != nil {
		return st, fmt.Errorf("generate log: %w", out.err)
	}
	st.Lines = out.lines
	st.Calls = out.lines - st.Noise
	return st, nil
}

func withDefaults(o Options) Options {
	if o.Calls <= 0 {
		o.Calls = 10000
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Rate <= 0 {
		o.Rate = 3
	}
	if o.MeanHeld <= 0 {
		o.MeanHeld = 1500 * time.Millisecond
	}
	if o.Users <= 0 {
		o.Users = 200
	}
	if o.Tasks <= 0 {
		o.Tasks = 2
	}
	if o.Policy == nil && o.Config != nil {
		o.Policy = o.Config.Policy()
	}
	if o.Policy == nil {
		o.Policy = policy.OCL()
	}
	if o.Config == nil {
		c := settings.Default(o.Policy, settings.ModeShadow)
		o.Config = &c
	}
	return o
}

// errOutage is what the store answers during a simulated outage.
var errOutage = errors.New("simulated lane store outage: connection refused")

// outageStore wraps store so that every operation fails while down is set.
// It offers none of store's optional parts (no waitlist: a full lane
// refuses at once, on the simulated clock), so every call goes through it.
func outageStore(store capgate.LaneStore, down *atomic.Bool) capgate.LaneStore {
	return &mock.LaneStore{
		Base:   store,
		CapsFn: func() capgate.StoreCaps { return capgate.StoreCaps{} },
		AcquireFn: func(ctx context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
			if down.Load() {
				return false, errOutage
			}
			return store.Acquire(ctx, req, counts)
		},
		RenewFn: func(ctx context.Context, token string, keys []string, lease time.Duration) (int, error) {
			if down.Load() {
				return 0, errOutage
			}
			return store.Renew(ctx, token, keys, lease)
		},
		ReleaseFn: func(ctx context.Context, token string, keys []string) error {
			if down.Load() {
				return errOutage
			}
			return store.Release(ctx, token, keys)
		},
	}
}

func down(outages []Outage, us int64) bool {
	t := time.Duration(us) * time.Microsecond
	for _, o := range outages {
		if t >= o.At && t < o.At+o.For {
			return true
		}
	}
	return false
}

// noise writes one line that is not a call's line and returns its
// log_dropped: a config change's line is the policy's event + "_config",
// changing the first per-tier lane number for the default tier (OCL:
// tiers.preview), else the first lane number.
func noise(s *sink, rng *rand.Rand, now time.Time, cfg *settings.Config) int64 {
	ts := now.UTC().Format(time.RFC3339Nano)
	switch rng.IntN(3) {
	case 0:
		_ = s.Emit(fmt.Appendf(nil, `{"time":%q,"level":"WARN","msg":"capacity lane store failed","op":"acquire"}`, ts))
	case 1:
		_ = s.Emit(fmt.Appendf(nil, `{"event":%q,"version":7,"changed_by":"ops","source":"command","changes":{%q:[2,3]},"mode":"shadow","log_dropped":2}`,
			cfg.Policy().Names.LogEvent+"_config", noiseKey(cfg)))
		return 2
	default:
		_ = s.Emit(fmt.Appendf(nil, `time=%s level=INFO msg="gateway listening"`, ts))
	}
	return 0
}

// noiseKey returns the config key a noise line's change names.
func noiseKey(cfg *settings.Config) string {
	p := cfg.Policy()
	tiers := p.Tiers()
	for _, l := range p.Lanes {
		if l.Limit.PerTier != nil && len(tiers) > 0 {
			return l.Limit.ConfigKeys(tiers)[len(tiers)-1]
		}
	}
	if keys := cfg.Keys(); len(keys) > 0 {
		return keys[0]
	}
	return "mode"
}
