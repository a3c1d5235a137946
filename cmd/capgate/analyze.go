package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

const analyzeUsage = `Usage: capgate analyze [flags] [FILE...]

Reads the per-call log lines of a policy (the built-in OCL policy's
the built-in policy's lines, or those of --policy) from the files (stdin when none;
"-" is stdin) and reports calls by decision, route and tier; peak calls in
flight per lane against its limit; shadow-refusal rates by lane, tier and
user; held_ms and queue_ms percentiles; lane store unavailability windows;
and the lines the gateways dropped. Other lines are skipped and counted.
Several files (one per gateway) are merged by ts.

Flags may come before or after the files:
  --json              write the report as JSON instead of text
  --html FILE         also write the report as one self-contained HTML page
  --policy FILE       the policy the gateways ran: its event, routes,
                      fields, lanes and tiers are what is read, and its
                      config keys what --what-if and --config take
                      (default: the built-in OCL policy; "ocl" names it)
  --what-if K=V...    replay the calls against the config changed by these
                      assignments ("capgate capacity set" syntax; every
                      K=V argument after the flag, up to the next flag)
  --config FILE       the config the what-if changes start from: a config
                      JSON object (missing keys take the policy's
                      defaults) or the output of "capgate capacity show";
                      default: the policy's defaults
  --top N             users listed (default 10)
  --max-users N       users tracked one by one; later ones are folded
                      (default 10000)
  --horizon DURATION  how far a call's start may precede lines already
                      read (default 60s; grows with the longest held_ms)
  --                  the rest are files

Example:
  capgate analyze gw1.log gw2.log --what-if api_heavy.cluster=6 mode=enforce enforce_for=all --html report.html
  capgate analyze --policy examples/inference/policy.yaml gw.log --what-if lanes.model=4
`

// AnalyzeCommand is "capgate analyze": it reads logs and writes a report.
// Stdin is read when no file is given; the report goes to Stdout.
type AnalyzeCommand struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// analyzeArgError is a bad command line or what-if. It unwraps to its
// cause (so errors.Is finds analyze.ErrInvalidWhatIf) and matches
// *UsageError in errors.As, so main exits 2 for it.
type analyzeArgError struct{ err error }

func (e *analyzeArgError) Error() string {
	return e.err.Error() + "\nRun \"capgate analyze -h\" for help."
}

func (e *analyzeArgError) Unwrap() error { return e.err }

func (e *analyzeArgError) As(target any) bool {
	if u, ok := target.(**UsageError); ok {
		*u = &UsageError{Msg: e.Error()}
		return true
	}
	return false
}

func analyzeArgErrorf(format string, a ...any) error {
	return &analyzeArgError{fmt.Errorf(format, a...)}
}

// analyzeArgs is a parsed command line.
type analyzeArgs struct {
	json     bool
	html     string
	whatIf   []string
	hasWhat  bool
	config   string
	policy   string
	files    []string
	opts     analyze.Options
	showHelp bool
}

// parseAnalyzeArgs parses the flags, wherever they are.
func parseAnalyzeArgs(args []string) (analyzeArgs, error) {
	var a analyzeArgs
	value := func(i *int, name string, inline string, hasInline bool) (string, error) {
		if hasInline {
			return inline, nil
		}
		if *i+1 >= len(args) {
			return "", analyzeArgErrorf("%s needs a value", name)
		}
		*i++
		return args[*i], nil
	}
	positive := func(name, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, analyzeArgErrorf("%s must be a whole number of at least 1, got %q", name, v)
		}
		return n, nil
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			a.files = append(a.files, args[i+1:]...)
			break
		}
		if arg == "-" || !strings.HasPrefix(arg, "-") {
			a.files = append(a.files, arg)
			continue
		}
		name, inline, hasInline := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		var err error
		var v string
		switch name {
		case "h", "help":
			a.showHelp = true
		case "json":
			a.json = true
		case "html":
			a.html, err = value(&i, "--html", inline, hasInline)
		case "config":
			a.config, err = value(&i, "--config", inline, hasInline)
		case "policy":
			a.policy, err = value(&i, "--policy", inline, hasInline)
		case "what-if":
			a.hasWhat = true
			if hasInline {
				a.whatIf = append(a.whatIf, inline)
			}
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && strings.Contains(args[i+1], "=") {
				i++
				a.whatIf = append(a.whatIf, args[i])
			}
		case "top":
			if v, err = value(&i, "--top", inline, hasInline); err == nil {
				a.opts.Top, err = positive("--top", v)
			}
		case "max-users":
			if v, err = value(&i, "--max-users", inline, hasInline); err == nil {
				a.opts.MaxUsers, err = positive("--max-users", v)
			}
		case "horizon":
			if v, err = value(&i, "--horizon", inline, hasInline); err == nil {
				d, perr := time.ParseDuration(v)
				if perr != nil || d <= 0 {
					err = analyzeArgErrorf("--horizon must be a positive duration such as 90s, got %q", v)
				}
				a.opts.Horizon = d
			}
		default:
			err = analyzeArgErrorf("unknown flag %s", arg)
		}
		if err != nil {
			return a, err
		}
	}
	return a, nil
}

// Run analyzes the logs named by args. Errors: an *analyzeArgError for a bad
// command line, policy or what-if (the policy's errors, the messages of the
// assignments' parser and of Config.Apply's *settings.ValidationError, as
// they are), or a wrapped I/O error.
func (c *AnalyzeCommand) Run(ctx context.Context, args []string) error {
	if err := c.run(ctx, args); err != nil {
		return fmt.Errorf("capgate analyze: %w", err)
	}
	return nil
}

func (c *AnalyzeCommand) run(ctx context.Context, args []string) error {
	a, err := parseAnalyzeArgs(args)
	if err != nil {
		return err
	}
	if a.showHelp {
		_, err := fmt.Fprint(c.Stdout, c.Usage())
		return err
	}
	p, err := readAnalyzePolicy(a.policy)
	if err != nil {
		return err
	}
	a.opts.Policy = p
	base := settings.Default(p, settings.ModeShadow)
	if a.config != "" {
		if base, err = readAnalyzeConfig(a.config, p); err != nil {
			return err
		}
	}
	a.opts.Base = &base
	if a.hasWhat {
		cfg, _, err := analyze.WhatIfConfig(base, a.whatIf)
		if err != nil {
			return analyzeArgErrorf("--what-if: %w", err)
		}
		a.opts.WhatIf = &cfg
	}

	inputs, closeAll, err := c.open(a.files)
	if err != nil {
		return err
	}
	defer closeAll()
	r, err := analyze.Analyze(ctx, inputs, a.opts)
	if err != nil {
		return err
	}
	if a.html != "" {
		if err := writeAnalyzeHTML(a.html, r); err != nil {
			return err
		}
	}
	if a.json {
		return analyze.WriteJSON(c.Stdout, r)
	}
	if err := analyze.WriteText(c.Stdout, r); err != nil {
		return err
	}
	if a.html != "" {
		fmt.Fprintf(c.Stdout, "\nHTML report written to %s\n", a.html)
	}
	return nil
}

// open opens the inputs: the files, or stdin when there are none.
func (c *AnalyzeCommand) open(files []string) ([]analyze.Input, func(), error) {
	if len(files) == 0 {
		files = []string{"-"}
	}
	var inputs []analyze.Input
	var opened []*os.File
	closeAll := func() {
		for _, f := range opened {
			_ = f.Close()
		}
	}
	stdinUsed := false
	for _, name := range files {
		if name == "-" {
			if stdinUsed {
				closeAll()
				return nil, nil, analyzeArgErrorf(`"-" (stdin) given more than once`)
			}
			stdinUsed = true
			inputs = append(inputs, analyze.Input{Name: "stdin", R: c.Stdin})
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open log: %w", err)
		}
		opened = append(opened, f)
		inputs = append(inputs, analyze.Input{Name: name, R: f})
	}
	return inputs, closeAll, nil
}

// readAnalyzePolicy reads the policy file name: nil (the built-in OCL
// policy) for "" or "ocl". A file that can't be read is an I/O error; a
// policy that does not parse, an *analyzeArgError with its errors.
func readAnalyzePolicy(name string) (*policy.Policy, error) {
	if name == "" || name == "ocl" {
		return nil, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := policy.Parse(name, b)
	if err != nil {
		return nil, analyzeArgErrorf("--policy: %w", err)
	}
	return p, nil
}

// readAnalyzeConfig reads a config (or "capgate capacity show" output) of
// policy p (nil: OCL) and returns p's defaults overlaid with it,
// validated.
func readAnalyzeConfig(name string, p *policy.Policy) (settings.Config, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return settings.Config{}, fmt.Errorf("read config: %w", err)
	}
	doc, err := jsontree.Parse(b)
	if err != nil {
		return settings.Config{}, analyzeArgErrorf("--config %s: %w", name, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return settings.Config{}, analyzeArgErrorf("--config %s: config must be an object.", name)
	}
	if inner, ok := obj["config"].(map[string]any); ok {
		obj = inner // the output of "capgate capacity show"
	}
	cfg, _, err := settings.Default(p, settings.ModeShadow).Apply(settings.Patch(obj))
	if err != nil {
		return settings.Config{}, analyzeArgErrorf("--config %s: %w", name, err)
	}
	return cfg, nil
}

func writeAnalyzeHTML(name string, r *analyze.Report) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("write html report: %w", cerr)
		}
	}()
	return analyze.WriteHTML(f, r)
}

// Usage returns the command's help.
func (c *AnalyzeCommand) Usage() string { return analyzeUsage }
