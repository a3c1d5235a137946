// Package analyze reads the per-call log lines of capgate gateways (the
// event their policy names) and reports what they
// show: calls by decision, route and tier; the peak calls in flight per
// lane against its limit, as recorded and as rebuilt from the calls'
// intervals; shadow-refusal rates; held and queue time percentiles; lane
// store unavailability windows; dropped lines. With a changed config it
// replays the calls, planning each one as the gate does, and reports what
// that config would have refused.
//
// The policy says everything of the lines: the event, the route key and
// the routes' log names, the fields and classes, the lanes (in plan
// order) and their log keys, the tiers and their order. Options.Policy
// names it; the default is the built-in OCL policy.
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

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Defaults of Options.
const (
	DefaultMaxUsers = 10000
	DefaultTop      = 10
	DefaultHorizon  = 60 * time.Second
)

// Options tune Analyze. The zero value uses the defaults.
type Options struct {
	// Policy is the policy the log was written under: the event, keys,
	// routes, fields, classes, lanes and tiers Analyze reads. Default:
	// Base's policy when Base is set, else the built-in OCL policy
	// (policy.OCL()).
	Policy *policy.Policy
	// Base is the config the log's limits are compared with and the
	// what-if change is merged onto; a config of Policy. Default
	// settings.Default(Policy, shadow).
	Base *settings.Config
	// WhatIf, when set, is the changed config to replay the calls against
	// (see WhatIfConfig); a config of Policy.
	WhatIf *settings.Config
	// MaxUsers bounds the users tracked one by one (about 300 bytes each);
	// later users are folded into "(other users)". It bounds the values of
	// a lane keyed by a call field too. Default DefaultMaxUsers.
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

// ErrPolicyMismatch is wrapped by Analyze's error when Options.Base or
// Options.WhatIf is a config of another policy than Options.Policy.
var ErrPolicyMismatch = errors.New("config of another policy")

// WhatIfConfig applies assignments ("tiers.preview=1", the syntax of
// `capgate capacity set`) to base, as a settings.Patch (Config.Apply): the
// keys are those of base's policy. It returns the config and its
// differences from base. It fails with the assignments' parse error for
// malformed ones, and for bad values with an error wrapping both
// ErrInvalidWhatIf and Apply's *settings.ValidationError, whose messages
// it lists.
func WhatIfConfig(base settings.Config, assignments []string) (settings.Config, settings.Diff, error) {
	change, err := jsontree.ParseAssignments(assignments)
	if err != nil {
		return settings.Config{}, nil, err
	}
	cfg, changes, err := base.Apply(settings.Patch(change))
	if err != nil {
		return settings.Config{}, nil, fmt.Errorf("%w: %w", ErrInvalidWhatIf, err)
	}
	return cfg, changes, nil
}

// orDefault returns v, or def when v is zero or negative: an Options
// field left unset.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Analyze reads the inputs (merged by ts when there are several, as one
// log per gateway) and returns the report. Lines that are not lines of the
// policy's event are skipped and counted. It fails when an input can't be
// read, or when ctx ends, the error wrapping the cause; and with
// ErrPolicyMismatch for a Base or WhatIf of another policy.
func Analyze(ctx context.Context, inputs []Input, opts Options) (*Report, error) {
	p := opts.Policy
	if p == nil && opts.Base != nil {
		p = opts.Base.Policy()
	}
	if p == nil {
		p = policy.OCL()
	}
	base := settings.Default(p, settings.ModeShadow)
	if opts.Base != nil {
		base = *opts.Base
	}
	for _, c := range []struct {
		what string
		cfg  *settings.Config
	}{{"base", &base}, {"what-if", opts.WhatIf}} {
		if c.cfg != nil && c.cfg.Policy() != p {
			return nil, fmt.Errorf("analyze: the %s config: %w (%s, not %s)", c.what, ErrPolicyMismatch, c.cfg.Policy().Name, p.Name)
		}
	}
	lay := newLayout(p)
	maxUsers := orDefault(opts.MaxUsers, DefaultMaxUsers)
	top := orDefault(opts.Top, DefaultTop)
	horizon := orDefault(opts.Horizon, DefaultHorizon)
	maxLine := orDefault(opts.MaxLineBytes, DefaultMaxLineBytes)

	c := newCounter(maxUsers, lay)
	ps := newParser(maxUsers+1000, lay)
	pool := &evPool{}
	srcs := make([]*source, len(inputs))
	for i, in := range inputs {
		srcs[i] = newSource(i, in, maxLine, ps, c, pool)
	}
	var w *whatIf
	if opts.WhatIf != nil {
		w = newWhatIf(*opts.WhatIf, lay)
	}
	sw := newSweep(lay, c, horizon.Milliseconds(), holdCapMS(base), w, pool)
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

	r := &Report{Policy: p}
	for _, s := range srcs {
		r.Inputs = append(r.Inputs, *s.sum)
	}
	c.fill(r, top)
	sw.fill(r)
	if w != nil {
		r.WhatIf.Changes = jsontree.Diff(base.Doc(), opts.WhatIf.Doc())
		r.WhatIf.Config = *opts.WhatIf
		r.WhatIf.Notes = whatIfNotes(r, w)
	}
	return r, nil
}

// whatIfNotes says what the replay could not know.
func whatIfNotes(r *Report, w *whatIf) []string {
	cfg := w.cfg
	notes := []string{
		"Extra wait is an estimate: the sum of Retry-After over the calls the changed config refuses. " +
			"Retries are not modelled: a refused call is dropped from the replay, so the calls after it see less load than they would.",
		"A call's interval is [ts - held_ms, ts) at millisecond resolution; calls that start or end in the same millisecond may be ordered differently than the lane store saw them (see near_ties).",
	}
	if r.WhatIf.NoLease > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) refused in the log would be admitted; they never ran, so they hold no lease in the replay.", r.WhatIf.NoLease))
	}
	if w.noRoute > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) of a route policy %s lacks were replayed in no lane, and admitted.", w.noRoute, w.lay.p.Name))
	}
	if cfg.Mode == settings.ModeEnforce && cfg.EnforceFor == settings.EnforceAware {
		notes = append(notes, "The log records whether a call was enforced, not whether the client was capacity-aware: "+
			"with enforce_for=aware only calls logged as enforced are treated as aware, so a shadow log gives no refusals; try enforce_for=all.")
	}
	if r.Reconstruction.Late > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) started more than the horizon before lines already read and were replayed late; raise --horizon.", r.Reconstruction.Late))
	}
	return notes
}
