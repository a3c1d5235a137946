// Command capgate is the capacity gate: a gateway in front of an HTTP API
// (serve), its runtime config (capacity), and a demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/server"
)

func main() { os.Exit(processMain()) }

// processMain is the process's wiring around Run: the signals that stop it.
// Tests run it in a process of their own (TestMain).
func processMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis logs through one process-wide logger: route it into slog,
	// once, here.
	goredis.SetLogger(redisLogger{})
	return Run(withProcess(ctx), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

const usage = `capgate caps how many heavy calls of an HTTP API run at once.

Usage:
  capgate <command> [flags]

Commands:
  serve      run the gateway in front of an API
  decide     run the decision service an app asks from inside (docs/PROTOCOL.md)
  capacity   show and change the runtime config: show|set|reset|rollback|history|status
  demo       run a simulated API, the gateway and simulated users for ~30 s
  loadgen    drive a gateway with simulated Mapper users and report
  analyze    report on the per-call log lines; --what-if replays them against a changed config
  simapi     serve the demo's simulated OCL API, to try serve in front of
  policy     check a policy file, or show one (default: the built-in policy)
  migrate    create or update the config database's tables
  healthcheck  probe a gateway's /livez (for images without curl)

Run "capgate <command> -h" for a command's flags, "capgate --version" for
the version.
`

// Run runs one capgate command with args (without the program name) and
// returns the process exit code. Tests call it with real arguments.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, "capgate", server.Version())
		return 0
	case "serve":
		cmd := &ServeCommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "decide":
		cmd := &DecideCommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "demo":
		cmd := &DemoCommand{Stdout: stdout, Stderr: stderr, Live: isTerminal(stdout)}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "loadgen":
		cmd := &LoadgenCommand{Stdout: stdout, Stderr: stderr, Live: isTerminal(stderr)}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "simapi":
		cmd := &SimAPICommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "healthcheck":
		cmd := &HealthcheckCommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "migrate":
		cmd := &MigrateCommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "capacity":
		cmd := &CapacityCommand{Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	case "policy":
		return exitCode(stderr, (&PolicyCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, args[1:]))
	case "analyze":
		cmd := &AnalyzeCommand{Stdin: stdin, Stdout: stdout, Stderr: stderr}
		return exitCode(stderr, cmd.Run(ctx, args[1:]))
	}
	fmt.Fprintf(stderr, "capgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// exitCode prints err, if any, on stderr and returns the exit code: 0 for
// none, 2 for a *UsageError, else 1.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, strings.TrimSuffix(err.Error(), "\n"))
	if _, ok := errors.AsType[*UsageError](err); ok {
		return 2
	}
	return 1
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// helpOf returns a command's usage followed by its flags and their defaults.
// parseFlags parses args into fs. It is done (the command should return
// err) when args asked for help, which it prints to stdout, or when they
// are wrong: then err is a *UsageError with the help.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) (done bool, err error) {
	err = fs.Parse(args)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, helpOf(usage, fs))
		return true, nil
	default:
		return true, &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, helpOf(usage, fs))}
	}
}

func helpOf(usage string, fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(usage)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}
