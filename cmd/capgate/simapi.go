package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/demo"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/tools/simapi"
)

// SimAPICommand is `capgate simapi`: the demo's simulated API on its own
// (the built-in policy's, with --api inference an OpenAI-compatible one,
// or with --api policy one of any policy's routes), to put capgate serve
// in front of when trying it out.
type SimAPICommand struct {
	Stdout, Stderr io.Writer
}

// Usage returns the command's help.
func (c *SimAPICommand) Usage() string {
	return `Usage: capgate simapi [--listen ADDR] [--tokens FILE] [--latency LO-HI]
                     [--backend-capacity K --backend-base-ms B [--backend-per-row]]
       capgate simapi --api inference [--listen ADDR] [--step D] [--batch-knee N]
                     [--kv-tokens N] [--model-kv M=N,...] [--latency D]
       capgate simapi --api policy --policy FILE [--listen ADDR] [--tokens FILE] [--knee N]

Serves a simulated OCL API: GET /user/ for the demo users (tokens such as
core-1-token, preview-1-token, staff-1-token), and POST /concepts/$match/ and
/concepts/$rerank/ that take a realistic, randomized time (or, with
--latency 1.2s-1.4s, a time uniform in that range). GET /_simapi/stats gives
the heavy calls served and their summed time in the API (busy_ms). --tokens
writes the users as a tokens file for capgate serve --identity tokens.

With --backend-capacity K, semantic calls go to a model of a shared backend
that serves K calls at once: each takes B × max(1, in_flight / K) ms
(--backend-base-ms B), in_flight being the semantic calls running when it
starts; with --backend-per-row a semantic call sends its rows one after
another, as a bulk $match does, and takes rows × that. GET /_sim/backend gives its capacity and the latencies it gave
(p50_ms, p99_ms; ?reset=1 starts them over); POST /_sim/backend
{"capacity": K} changes the capacity at runtime ({"per_row": true} the
per-row model).

With --api inference it serves a fake OpenAI-compatible inference API for
examples/inference: POST /v1/chat/completions and /v1/completions answer in
OpenAI's shapes (streamed with "stream": true, the usage in a last chunk
with stream_options.include_usage), made by a simulated continuous-batching
engine: per model, a token of each running call per step of --step × (1 +
batch / --batch-knee); each call holds prompt + max_tokens tokens of the
model's KV cache (--kv-tokens, or per model --model-kv large=2048); past it
calls wait, and while they wait every step is slower (the engine thrashes),
so the model serves fewer tokens a second. A client that goes away stops
its call. With --latency D every completion takes D instead. POST
/v1/embeddings answers after --latency (default 2s); GET /v1/models lists
the models; GET /_simapi/stats gives the calls served, the most that ran at
once (in all, per model and per bearer token), the tokens generated and
each model's cache and queue.

With --api policy it serves a simulated API of the routes of the policy
--policy FILE (the demo's under that policy): every call a route matches
answers after 400 ms + 40 ms a unit of work (±40 %), slower past --knee N
calls at once and failing with 503 past twice that (0: no knee), anything
else {"ok":true}; --tokens writes users of each of the policy's tiers
(<tier>-<n>-token) for capgate serve --identity tokens, and only they are
served. GET /_simapi/stats gives the calls and the most at once, in all, per
route, per caller and per value of each string field. Flags:
`
}

// Run serves until ctx is done.
func (c *SimAPICommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capgate simapi", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on")
	tokens := fs.String("tokens", "", "also write the users to this tokens file")
	perTier := fs.Int("users-per-tier", 2, "users in each tier")
	latency := fs.String("latency", "", "every heavy call takes LO-HI, uniform (e.g. 1.2s-1.4s); default: by rows")
	capacity := fs.Int("backend-capacity", 0, "semantic calls use a backend of this many calls at once (0: none)")
	baseMS := fs.Float64("backend-base-ms", 50, "the backend's time per call when not overloaded, ms")
	perRow := fs.Bool("backend-per-row", false, "a semantic call sends its rows one after another: it takes rows × the backend's time")
	kind := fs.String("api", "ocl", "the API to simulate: ocl (the built-in policy's, the demo's), inference (examples/inference) or policy (the routes of --policy)")
	knee := fs.Int("knee", 0, "with --api policy: calls past this many at once are slower, past twice it fail (0: none)")
	var eng inferenceFlags
	fs.DurationVar(&eng.step, "step", simapi.DefaultStepTime, "with --api inference: one token of a batch of one")
	fs.IntVar(&eng.knee, "batch-knee", simapi.DefaultBatchKnee, "with --api inference: the batch at which a step takes twice --step")
	fs.IntVar(&eng.kv, "kv-tokens", simapi.DefaultKVTokens, "with --api inference: each model's KV cache, in tokens")
	fs.StringVar(&eng.models, "model-kv", "", "with --api inference: per model KV caches, M=N,... (e.g. large=2048)")
	var pst server.Settings
	fs.StringVar(&pst.PolicyFile, "policy", "", "with --api policy: the policy `file` whose routes to serve (YAML; docs/POLICY.md)")
	if done, err := parseFlags(fs, args, c.Usage(), c.Stdout); done {
		return err
	}
	switch *kind {
	case "ocl":
	case "inference":
		return c.inference(ctx, *listen, *latency, eng, fs)
	case "policy":
		if pst.PolicyFile == "" {
			return &UsageError{Msg: "--api policy: give --policy FILE\n\n" + helpOf(c.Usage(), fs)}
		}
		pol, err := pst.LoadPolicy()
		if err != nil {
			return err
		}
		return c.generic(ctx, pol, *listen, *tokens, *perTier, *knee)
	default:
		return &UsageError{Msg: fmt.Sprintf("--api %q: want ocl, inference or policy\n\n%s", *kind, helpOf(c.Usage(), fs))}
	}
	var lo, hi time.Duration
	if *latency != "" {
		a, b, ok := strings.Cut(*latency, "-")
		var errA, errB error
		lo, errA = time.ParseDuration(a)
		hi, errB = time.ParseDuration(b)
		if !ok || errA != nil || errB != nil || lo < 0 || hi < lo {
			return &UsageError{Msg: fmt.Sprintf("--latency %q: want LO-HI, e.g. 1.2s-1.4s\n\n%s", *latency, helpOf(c.Usage(), fs))}
		}
	}
	users, _ := demo.Users(policy.OCL(), *perTier)
	if *tokens != "" {
		b, err := json.MarshalIndent(users, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*tokens, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	api := simapi.New(users)
	if *latency != "" {
		api.Latency = simapi.UniformLatency(lo, hi)
	}
	var handler http.Handler = api
	if *capacity > 0 {
		if *baseMS <= 0 {
			return &UsageError{Msg: fmt.Sprintf("--backend-base-ms %v: want a positive number of ms\n\n%s", *baseMS, helpOf(c.Usage(), fs))}
		}
		be := simapi.NewBackend(*capacity, time.Duration(*baseMS*float64(time.Millisecond)))
		be.SetPerRow(*perRow)
		be.Use(api)
		handler = be.Handler(api)
		fmt.Fprintf(c.Stderr, "semantic backend: %d calls at once, %v ms each when not overloaded\n", *capacity, *baseMS)
	}
	fmt.Fprintf(c.Stderr, "simulated OCL API on http://%s; users:", ln.Addr())
	for _, u := range users {
		fmt.Fprintf(c.Stderr, " %s", u.Token)
	}
	fmt.Fprintln(c.Stderr)
	return serveUntil(ctx, ln, handler)
}

// inferenceFlags are the engine's flags of --api inference.
type inferenceFlags struct {
	step   time.Duration
	knee   int
	kv     int
	models string
}

// engine returns the Engine the flags describe.
func (f inferenceFlags) engine() (*simapi.Engine, error) {
	if f.step <= 0 || f.knee < 1 || f.kv < 1 {
		return nil, fmt.Errorf("--step, --batch-knee and --kv-tokens: want a positive duration and numbers of at least 1")
	}
	e := &simapi.Engine{StepTime: f.step, BatchKnee: f.knee, DefaultKVTokens: f.kv, KVTokens: map[string]int{}}
	for pair := range strings.SplitSeq(f.models, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		m, n, ok := strings.Cut(pair, "=")
		v, err := strconv.Atoi(n)
		if !ok || m == "" || err != nil || v < 1 {
			return nil, fmt.Errorf("--model-kv %q: want MODEL=TOKENS pairs, e.g. large=2048", f.models)
		}
		e.KVTokens[m] = v
	}
	return e, nil
}

// inference serves the fake inference API (--api inference).
func (c *SimAPICommand) inference(ctx context.Context, listen, latency string, f inferenceFlags, fs *flag.FlagSet) error {
	api := &simapi.Inference{}
	if latency != "" {
		d, err := time.ParseDuration(latency)
		if err != nil || d < 0 {
			return &UsageError{Msg: fmt.Sprintf("--latency %q: want a duration such as 2s\n\n%s", latency, helpOf(c.Usage(), fs))}
		}
		api.Latency = d
	} else {
		e, err := f.engine()
		if err != nil {
			return &UsageError{Msg: err.Error() + "\n\n" + helpOf(c.Usage(), fs)}
		}
		api.Engine = e
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	what := "every completion takes " + latency
	if api.Engine != nil {
		what = fmt.Sprintf("a batching engine: %v a token, batch knee %d, KV cache %d tokens a model", f.step, f.knee, f.kv)
		if f.models != "" {
			what += " (" + f.models + ")"
		}
	}
	fmt.Fprintf(c.Stderr, "fake inference API on http://%s (models small, large; %s)\n", ln.Addr(), what)
	return serveUntil(ctx, ln, api)
}

// generic serves a simulated API of p's routes (--api policy).
func (c *SimAPICommand) generic(ctx context.Context, p *policy.Policy, listen, tokens string, perTier, knee int) error {
	users, _ := demo.Users(p, perTier)
	if tokens != "" {
		if err := demo.WriteTokens(tokens, users); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	api := &simapi.Generic{Policy: p, Users: users}
	if knee > 0 {
		api.Knee = &simapi.Knee{Capacity: knee, FailAt: 2 * knee}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	fmt.Fprintf(c.Stderr, "simulated API of policy %s on http://%s; users:", p.Name, ln.Addr())
	for _, u := range users {
		fmt.Fprintf(c.Stderr, " %s", u.Token)
	}
	fmt.Fprintln(c.Stderr)
	return serveUntil(ctx, ln, api)
}

// serveUntil serves h on ln until ctx is done, then shuts down.
func serveUntil(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
