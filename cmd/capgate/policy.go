package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/capgate/capgate/frontproxy"
	"github.com/capgate/capgate/policy"
)

// PolicyCommand is `capgate policy check|show`: validate a policy file and
// show what capgate reads in it. serve, decide and capacity run one with
// --policy (CAPGATE_POLICY); without, the built-in policy.
type PolicyCommand struct {
	Stdout, Stderr io.Writer
}

// Usage returns the command's help.
func (c *PolicyCommand) Usage() string {
	return `Usage:
  capgate policy check FILE...       check policy files: exit 0, or 1 with
                                     every error on a line of its own
                                     (file:line: field: message)
  capgate policy show [--yaml] [FILE|ocl]
                                     show what capgate reads in a policy
                                     (default: the built-in policy, ocl);
                                     --yaml prints the file itself
  capgate policy routes --format nginx|haproxy|alb [flags] [FILE|ocl]
                                     the front proxy's routing: the heavy
                                     routes' calls to capgate, every other
                                     call straight to the API (flags:
                                     --listen, --capgate, --api host:port,
                                     --path-prefix)

The schema is docs/POLICY.md. serve, decide and capacity run a policy with
--policy FILE (CAPGATE_POLICY); without one, the built-in policy.
`
}

// Run runs one policy subcommand.
func (c *PolicyCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &UsageError{Msg: c.Usage()}
	}
	switch args[0] {
	case "check":
		return c.check(args[1:])
	case "show":
		return c.show(args[1:])
	case "routes":
		return c.routes(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.Stdout, c.Usage())
		return nil
	}
	return &UsageError{Msg: fmt.Sprintf("unknown policy command %q\n\n%s", args[0], c.Usage())}
}

func (c *PolicyCommand) flags(name string, args []string, yaml *bool) ([]string, error) {
	fs := flag.NewFlagSet("capgate policy "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if yaml != nil {
		fs.BoolVar(yaml, "yaml", false, "print the policy file itself")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.Stdout, c.Usage())
			return nil, flag.ErrHelp
		}
		return nil, &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, c.Usage())}
	}
	return fs.Args(), nil
}

// check parses each file and reports it ok, or every error of it.
func (c *PolicyCommand) check(args []string) error {
	files, err := c.flags("check", args, nil)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) == 0 {
		return &UsageError{Msg: "capgate policy check needs a FILE\n\n" + c.Usage()}
	}
	var errs []error
	for _, f := range files {
		p, err := policy.Load(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(c.Stdout, "%s: ok (policy %s: %d routes, %d lanes)\n", f, p.Name, len(p.Routes), len(p.Lanes))
	}
	return errors.Join(errs...)
}

// show prints the summary (or the YAML) of a file, or of the built-in
// policy.
func (c *PolicyCommand) show(args []string) error {
	var yaml bool
	rest, err := c.flags("show", args, &yaml)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(rest) > 1 {
		return &UsageError{Msg: c.Usage()}
	}
	p := policy.OCL()
	if len(rest) == 1 && rest[0] != "ocl" {
		if p, err = policy.Load(rest[0]); err != nil {
			return err
		}
	}
	if yaml {
		_, err = c.Stdout.Write(p.Source())
		return err
	}
	return p.WriteSummary(c.Stdout)
}

// routes prints the front proxy's routing for a policy (frontproxy).
func (c *PolicyCommand) routes(args []string) error {
	fs := flag.NewFlagSet("capgate policy routes", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "", "the front proxy: "+strings.Join(frontproxy.Formats, ", "))
	var o frontproxy.Options
	fs.StringVar(&o.Listen, "listen", frontproxy.DefaultListen, "the front proxy's address")
	fs.StringVar(&o.Capgate, "capgate", frontproxy.DefaultCapgate, "capgate's address, host:port")
	fs.StringVar(&o.API, "api", frontproxy.DefaultAPI, "the API's address, host:port")
	fs.StringVar(&o.PathPrefix, "path-prefix", "", "where the API is mounted (capgate's --path-prefix)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.Stdout, c.Usage())
			return nil
		}
		return &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, c.Usage())}
	}
	if *format == "" || fs.NArg() > 1 {
		return &UsageError{Msg: "capgate policy routes needs --format " + strings.Join(frontproxy.Formats, "|") + " and at most one FILE\n\n" + c.Usage()}
	}
	p := policy.OCL()
	if fs.NArg() == 1 && fs.Arg(0) != "ocl" {
		var err error
		if p, err = policy.Load(fs.Arg(0)); err != nil {
			return err
		}
	}
	return frontproxy.Write(c.Stdout, *format, p, o)
}
