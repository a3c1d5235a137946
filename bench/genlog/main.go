// Command genlog writes a generated log to stdout: the real capgate.Gate
// on a simulated clock (see package tools/genlog), for benchmarking
// `capgate analyze`. Its lines are ocl_capacity lines, or those of the
// policy -policy names.
//
//	go run ./bench/genlog -n 1000000 -rate 100 > /tmp/capgate-1m.jsonl
//	go run ./bench/genlog -policy examples/inference/policy.yaml -n 100000 > /tmp/inference.jsonl
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tools/genlog"
)

func main() {
	n := flag.Int("n", 1000000, "calls to generate")
	rate := flag.Float64("rate", 100, "calls arriving per second")
	held := flag.Duration("held", 1500*time.Millisecond, "mean time a call runs")
	users := flag.Int("users", 2000, "users")
	tasks := flag.Int("tasks", 4, "gateways")
	noise := flag.Int("noise", 1000, "a line that is no call's after every this many calls; 0: none")
	seed := flag.Uint64("seed", 1, "random seed")
	policyFile := flag.String("policy", "", "the policy file the gates run (default: the built-in OCL policy)")
	flag.Parse()
	var p *policy.Policy
	if *policyFile != "" {
		var err error
		if p, err = policy.Load(*policyFile); err != nil {
			fmt.Fprintln(os.Stderr, "genlog:", err)
			os.Exit(1)
		}
	}
	st, err := genlog.Generate(context.Background(), os.Stdout, genlog.Options{
		Calls: *n, Rate: *rate, MeanHeld: *held, Users: *users, Tasks: *tasks,
		NoiseEvery: *noise, Seed: *seed, Policy: p,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "genlog:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "genlog: %d lines, %d calls, decisions %v\n", st.Lines, st.Calls, st.Decisions)
}
