package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/capgate/capgate/demo"
	"github.com/capgate/capgate/settings"
)

// DemoCommand is `capgate demo`: its flags, the run itself a demo.Demo.
type DemoCommand struct {
	Stdout, Stderr io.Writer
	// Live rewrites the progress line in place (a terminal); otherwise a
	// progress line is printed every 5 s.
	Live bool
}

// Usage returns the command's help.
func (c *DemoCommand) Usage() string {
	return `Usage: capgate demo [flags]

Starts a simulated OCL API on loopback whose capacity is the default
api_heavy.cluster limit (4 heavy calls at once: past it the calls share it and
it loses throughput, as a kNN backend whose caches thrash: at 8 each call
takes 6 times as long and the API does a third of its work; past 8 calls fail
with 503 after wasting a second of it), the real capgate gateway in front of it
(in-process lanes, SQLite config in a temporary directory), and simulated
Mapper users of every tier sending bulk and single-row $match and $rerank
calls through the capacity-aware client. The first half of the run is in
shadow (capgate counts, refuses nothing: the API is overloaded), the second
in enforce (calls wait at the gateway for a slot: the API stays at its
knee). Shows live progress, then the two halves side by side: what the API
served and failed, its latency, time waited at the gateway, refusals, and
each tier's share; decisions by tier and endpoint; peak calls in flight per
lane against its limit. Needs no services.

With --policy FILE the demo runs under that policy instead: a simulated API
that answers every call of the policy's routes (its knee: the first cluster
lane's limit), users of each of its tiers known from a tokens file the demo
writes (--identity tokens), sending its token scheme and calls made from its
routes (a model or other string field from a few values, the first most
often), and the summary in its tiers, routes and lanes (a lane keyed by a
field shown per value). Flags:
`
}

// Run parses the flags and runs the demo.
func (c *DemoCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capgate demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	d := &demo.Demo{Stdout: c.Stdout, Stderr: c.Stderr, Live: c.Live}
	fs.DurationVar(&d.Duration, "duration", 20*time.Second, "how long the users send new calls, both halves together")
	mode := fs.String("mode", "both", "both (shadow, then enforce), or only shadow or only enforce")
	fs.IntVar(&d.PerTier, "users-per-tier", 2, "simulated users in each tier")
	fs.StringVar(&d.LogFile, "log-file", "", "write the per-call log lines here (default: a file in the demo's temporary directory)")
	// The demo reads no environment: --policy only.
	fs.StringVar(&d.PolicyFile, "policy", "", "run under this policy `file` (YAML; docs/POLICY.md); none: the built-in policy, the OCL Mapper's demo")
	if done, err := parseFlags(fs, args, c.Usage(), c.Stdout); done {
		return err
	}
	if *mode == "both" {
		d.Modes = []settings.Mode{settings.ModeShadow, settings.ModeEnforce}
	} else if m, ok := settings.ParseMode(*mode); ok && m != settings.ModeOff {
		d.Modes = []settings.Mode{m}
	} else {
		return &UsageError{Msg: fmt.Sprintf("--mode %q: use both, shadow or enforce", *mode)}
	}
	if d.PerTier < 1 || d.PerTier > 50 {
		return &UsageError{Msg: "--users-per-tier: want 1 to 50"}
	}
	if d.Duration <= 0 {
		return &UsageError{Msg: "--duration: want a positive duration such as 30s"}
	}
	return d.Run(ctx)
}
