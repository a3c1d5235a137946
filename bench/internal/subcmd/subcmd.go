// Package subcmd dispatches the subcommands of the bench tools
// (`fleet run|seed`, `storebench pairs|scale`).
package subcmd

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Main runs the subcommand os.Args[1] of prog with the arguments after it
// and exits: 2 without a subcommand, 1 when it fails or is unknown.
func Main(prog string, cmds map[string]func(args []string) error) {
	if code := Run(prog, os.Args[1:], os.Stderr, cmds); code != 0 {
		os.Exit(code)
	}
}

// Run runs the subcommand args[0] with args[1:], reporting to stderr, and
// returns the exit code: 0 when it succeeds, 2 without a subcommand (with
// a usage line), 1 when it fails or is unknown.
func Run(prog string, args []string, stderr io.Writer, cmds map[string]func(args []string) error) int {
	if len(args) < 1 {
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		slices.Sort(names)
		fmt.Fprintf(stderr, "usage: %s %s [flags]\n", prog, strings.Join(names, "|"))
		return 2
	}
	var err error
	if cmd, ok := cmds[args[0]]; ok {
		err = cmd(args[1:])
	} else {
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	return 0
}
