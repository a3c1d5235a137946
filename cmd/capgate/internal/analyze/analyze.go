// Package analyze reads the ocl_capacity log lines of capgate gateways
// and reports what they show: calls by decision, endpoint and tier; the
// peak calls in flight per lane against its limit, as recorded and as
// rebuilt from the calls' intervals; shadow-refusal rates; held and queue
// time percentiles; lane store unavailability windows; dropped lines. With
// a changed config it replays the calls and reports what that config would
// have refused.
//
// Analyze makes one streaming pass. Its memory is bounded by the options:
// per-user state for at most MaxUsers users, a fixed-size histogram and
// timeline, and the calls that start within one horizon (see Options).
package analyze

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/jsontree"
)

// Defaults of Options.
const (
	DefaultMaxUsers = 10000
	DefaultTop      = 10
	DefaultHorizon  = 60 * time.Second
)

// Options tune Analyze. The zero value uses the defaults.
type Options struct {
	// Base is the config the log's limits are compared with and the
	// what-if change is merged onto. Default capgate.DefaultConfig(shadow).
	Base *capgate.Config
	// WhatIf, when set, is the changed config to replay the calls against
	// (see WhatIfConfig).
	WhatIf *capgate.Config
	// MaxUsers bounds the users tracked one by one (about 300 bytes each);
	// later users are folded into "(other users)". Default DefaultMaxUsers.
	MaxUsers int
	// Top is how many users the report lists. Default DefaultTop.
	Top int
	// Horizon is the least time a call's start may come before the latest
	// ts read; it grows to the longest held_ms seen plus 2 s. A call that
	// starts earlier still is replayed at the horizon's edge and counted as
	// late. Default DefaultHorizon.
	Horizon time.Duration
	// MaxLineBytes is the longest line read. Default DefaultMaxLineBytes.
	MaxLineBytes int
}

// ErrInvalidWhatIf is wrapped by WhatIfConfig's error when the changed
// config does not validate.
var ErrInvalidWhatIf = errors.New("invalid what-if config")

// WhatIfConfig applies assignments ("tiers.preview=1", the syntax of
// `capgate capacity set`) to base (Config.Apply). It returns the config
// and its differences from base. It fails with the assignments' parse
// error for malformed ones, and for bad values with an error wrapping both
// ErrInvalidWhatIf and Apply's *capgate.ValidationError, whose messages it
// lists.
func WhatIfConfig(base capgate.Config, assignments []string) (capgate.Config, capgate.Diff, error) {
	change, err := jsontree.ParseAssignments(assignments)
	if err != nil {
		return capgate.Config{}, nil, err
	}
	cfg, changes, err := base.Apply(change)
	if err != nil {
		return capgate.Config{}, nil, fmt.Errorf("%w: %w", ErrInvalidWhatIf, err)
	}
	return cfg, changes, nil
}

// Analyze reads the inputs (merged by ts when there are several, as one
// log per gateway) and returns the report. Lines that are not ocl_capacity
// lines are skipped and counted. It fails only when an input can't be
// read, or when ctx ends; the error wraps the cause.
// orDefault returns v, or def when v is zero or negative: an Options
// field left unset.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func Analyze(ctx context.Context, inputs []Input, opts Options) (*Report, error) {
	base := capgate.DefaultConfig(capgate.ModeShadow)
	if opts.Base != nil {
		base = *opts.Base
	}
	maxUsers := orDefault(opts.MaxUsers, DefaultMaxUsers)
	top := orDefault(opts.Top, DefaultTop)
	horizon := orDefault(opts.Horizon, DefaultHorizon)
	maxLine := orDefault(opts.MaxLineBytes, DefaultMaxLineBytes)

	c := newCounter(maxUsers)
	p := newParser(maxUsers + 1000)
	pool := &evPool{}
	srcs := make([]*source, len(inputs))
	for i, in := range inputs {
		srcs[i] = newSource(i, in, maxLine, p, c, pool)
	}
	var w *whatIf
	if opts.WhatIf != nil {
		w = newWhatIf(*opts.WhatIf)
	}
	sw := newSweep(c, horizon.Milliseconds(), holdCapMS(base), w, pool)
	m, err := newMerger(srcs)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	for {
		ev, err := m.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		if ev == nil {
			break
		}
		c.add(ev)
		sw.push(ev)
	}
	sw.flush()

	r := &Report{}
	for _, s := range srcs {
		r.Inputs = append(r.Inputs, *s.sum)
	}
	c.fill(r, top)
	sw.fill(r)
	if w != nil {
		r.WhatIf.Changes = jsontree.Diff(base.Doc(), opts.WhatIf.Doc())
		r.WhatIf.Config = opts.WhatIf
		r.WhatIf.Notes = whatIfNotes(r, *opts.WhatIf)
	}
	return r, nil
}

// whatIfNotes says what the replay could not know.
func whatIfNotes(r *Report, cfg capgate.Config) []string {
	notes := []string{
		"Extra wait is an estimate: the sum of Retry-After over the calls the changed config refuses. " +
			"Retries are not modelled: a refused call is dropped from the replay, so the calls after it see less load than they would.",
		"A call's interval is [ts - held_ms, ts) at millisecond resolution; calls that start or end in the same millisecond may be ordered differently than the lane store saw them (see near_ties).",
	}
	if r.WhatIf.NoLease > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) refused in the log would be admitted; they never ran, so they hold no lease in the replay.", r.WhatIf.NoLease))
	}
	if cfg.Mode == capgate.ModeEnforce && cfg.EnforceFor == capgate.EnforceAware {
		notes = append(notes, "The log records whether a call was enforced, not whether the client was capacity-aware: "+
			"with enforce_for=aware only calls logged as enforced are treated as aware, so a shadow log gives no refusals; try enforce_for=all.")
	}
	if r.Reconstruction.Late > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) started more than the horizon before lines already read and were replayed late; raise --horizon.", r.Reconstruction.Late))
	}
	return notes
}
