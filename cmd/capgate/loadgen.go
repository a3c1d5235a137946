package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/server"
)

// LoadgenCommand is `capgate loadgen`: simulated users against a gateway:
// Mapper users under the built-in policy, users calling the policy's
// routes under any other.
type LoadgenCommand struct {
	Stdout, Stderr io.Writer
	// Live redraws the progress on one line (stderr is a terminal); else
	// each progress report is a line of its own.
	Live bool
}

// Usage returns the command's help.
func (c *LoadgenCommand) Usage() string {
	return `Usage: capgate loadgen --url URL[,URL...] --users FILE [flags]

Drives a gateway (or any API with the same contract) with simulated Mapper
users: each runs Auto Match-like jobs (batches of rows, single-row lookups,
reranks), or with --calls N exactly N bulk semantic $match calls, through
one of three clients (--client): aware (the capacity-aware client, which
waits out refusals; the default), plain (sends once, never retries: a 429 is
a failed row) or retry-after (the Mapper web client's rules: Retry-After
plus 0-50 % jitter, at least 1 s, one pause per user like one per tab).
With several URLs, user i sends to the (i mod n)th gateway. Ends with rows
done / throttled / failed per user and tier, Jain's fairness index per tier,
latency percentiles, 429s, the makespan, and with --bottleneck-limit the
bottleneck lane's utilization (from --sim-stats when given, else from the
calls' times as the client saw them) where the limit held the calls; where
calls went past it (shadow-refused, unavailable) it says so instead. The users file is the tokens file of
capgate serve: [{"token","username","auth_groups",...}].

With --policy FILE (the gateway's), the users speak that policy's names,
send their token in its identity scheme, and (--workload routes, the
default for any policy but the built-in one) call its routes: each job is
one call of a route picked at random, made so the route matches it (its
method and path, the query flags, headers and JSON body its predicates
need; a string field such as model from a few values, the first most often;
a body array of --rows items with --calls); a call counts as the rows of
its route's units field, else as 1. Flags:
`
}

// Run sends the load and prints the report; it fails if a row failed.
func (c *LoadgenCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capgate loadgen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := fs.String("url", "", "the gateway, e.g. http://127.0.0.1:8080 (required)")
	usersFile := fs.String("users", "", "the users: a tokens file (required)")
	duration := fs.Duration("duration", 30*time.Second, "how long users start new work")
	workers := fs.Int("workers", 3, "calls each user keeps going at once (the client lowers it to the suggested concurrency)")
	grace := fs.Duration("grace", 20*time.Second, "how long calls running at the end may take")
	clientKind := fs.String("client", loadgen.ClientAware, "aware, plain or retry-after")
	calls := fs.Int("calls", 0, "a fixed workload: this many bulk semantic $match calls per user (0: the job mix for --duration)")
	rows := fs.Int("rows", 10, "rows per call with --calls")
	heavy := fs.String("heavy", "", "with --calls, one heavy user: NAME:WORKERS:CALLS")
	limit := fs.Int("bottleneck-limit", 0, "the limit of the lane that binds first, to report its utilization")
	simStats := fs.String("sim-stats", "", "the upstream's stats URL (capgate simapi: http://HOST:PORT/_simapi/stats)")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	workload := fs.String("workload", "", "what users send: mapper (the built-in policy's Mapper jobs) or routes (calls of the policy's routes); default: mapper under the built-in policy, routes under any other")
	var st server.Settings
	st.PolicyFlag(fs)
	if done, err := parseFlags(fs, args, c.Usage(), c.Stdout); done {
		return err
	}
	pol, err := st.LoadPolicy()
	if err != nil {
		return err
	}
	if *base == "" || *usersFile == "" {
		return &UsageError{Msg: "give --url and --users\n\n" + helpOf(c.Usage(), fs)}
	}
	users, err := readUsers(*usersFile, pol)
	if err != nil {
		return err
	}
	if *heavy != "" {
		if err := setHeavy(users, *heavy); err != nil {
			return &UsageError{Msg: fmt.Sprintf("--heavy: %v\n\n%s", err, helpOf(c.Usage(), fs))}
		}
	}
	urls := strings.Split(*base, ",")
	fmt.Fprintf(c.Stderr, "loadgen: %d users against %s, client %s\n", len(users), *base, *clientKind)
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: urls[0], MoreURLs: urls[1:], Users: users, Duration: *duration,
		Workers: *workers, Grace: *grace, Client: *clientKind, Calls: *calls, BulkRows: [2]int{*rows, *rows},
		BottleneckLimit: *limit, SimStatsURL: *simStats, Policy: pol, Workload: *workload}, func(p loadgen.Progress) {
		line := fmt.Sprintf("%5.0fs  calls %d  rows done %d  throttled %d  failed %d",
			p.Elapsed.Seconds(), p.Calls, p.RowsDone, p.Throttled, p.Failed)
		if c.Live {
			fmt.Fprintf(c.Stderr, "\r%s \033[K", line) // one line, redrawn
		} else {
			fmt.Fprintln(c.Stderr, line) // piped: one line each, so logs stay readable
		}
	})
	if c.Live {
		fmt.Fprintln(c.Stderr)
	}
	if err != nil {
		return err
	}
	rep.Write(c.Stdout)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("%d rows failed", n)
	}
	return nil
}

// setHeavy gives the user named in spec (NAME:WORKERS:CALLS) its own
// workers and calls.
func setHeavy(users []loadgen.User, spec string) error {
	parts := strings.Split(spec, ":")
	if len(parts) != 3 {
		return fmt.Errorf("%q: want NAME:WORKERS:CALLS", spec)
	}
	w, errW := strconv.Atoi(parts[1])
	n, errN := strconv.Atoi(parts[2])
	if errW != nil || errN != nil || w < 1 || n < 1 {
		return fmt.Errorf("%q: want NAME:WORKERS:CALLS with positive numbers", spec)
	}
	for i := range users {
		if users[i].Name == parts[0] {
			users[i].Workers, users[i].Calls = w, n
			return nil
		}
	}
	return fmt.Errorf("no user %q", parts[0])
}

// readUsers reads a tokens file as load users; the tier comes from the
// tier rules of policy p.
func readUsers(path string, p *policy.Policy) ([]loadgen.User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--users: %w", err)
	}
	var entries []struct {
		Token    string   `json:"token"`
		Username string   `json:"username"`
		IsStaff  bool     `json:"is_staff"`
		Groups   []string `json:"auth_groups"`
	}
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("--users %s: %w", path, err)
	}
	var users []loadgen.User
	for _, e := range entries {
		if e.Token == "" || e.Username == "" {
			return nil, fmt.Errorf("--users %s: every entry needs a token and a username", path)
		}
		users = append(users, loadgen.User{Name: e.Username, Token: e.Token, Tier: p.Identity.TierOf(e.IsStaff, e.Groups)})
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--users %s: no users", path)
	}
	return users, nil
}
