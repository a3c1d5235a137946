package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/loadgen"
)

// LoadgenCommand is `capgate loadgen`: simulated Mapper users against a
// gateway.
type LoadgenCommand struct {
	Stdout, Stderr io.Writer
	// Live redraws the progress on one line (stderr is a terminal); else
	// each progress report is a line of its own.
	Live bool
}

// Usage returns the command's help.
func (c *LoadgenCommand) Usage() string {
	return `Usage: capgate loadgen --url URL --users FILE [flags]

Drives a gateway (or any API with the same contract) with simulated Mapper
users: each runs Auto Match-like jobs (batches of rows, single-row lookups,
reranks) through the capacity-aware client, which waits out refusals. Ends
with rows done / throttled / failed per user and tier, Jain's fairness index
per tier, latency percentiles and 429s by scope. The users file is the
tokens file of capgate serve: [{"token","username","auth_groups",...}].
Flags:
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.Stdout, helpOf(c.Usage(), fs))
			return nil
		}
		return &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, helpOf(c.Usage(), fs))}
	}
	if *base == "" || *usersFile == "" {
		return &UsageError{Msg: "give --url and --users\n\n" + helpOf(c.Usage(), fs)}
	}
	users, err := readUsers(*usersFile)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "loadgen: %d users against %s for %s\n", len(users), *base, *duration)
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: *base, Users: users, Duration: *duration,
		Workers: *workers, Grace: *grace}, func(p loadgen.Progress) {
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
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("%d rows failed", n)
	}
	return nil
}

// readUsers reads a tokens file as load users; the tier comes from the
// default group names.
func readUsers(path string) ([]loadgen.User, error) {
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
		users = append(users, loadgen.User{Name: e.Username, Token: e.Token, Tier: string(capgate.TierGroups{}.TierOf(e.IsStaff, e.Groups))})
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--users %s: no users", path)
	}
	return users, nil
}
