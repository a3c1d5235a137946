package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/server"
)

// socketModeValue is an octal file mode flag (0660).
type socketModeValue struct{ m *fs.FileMode }

func (v socketModeValue) String() string {
	if v.m == nil || *v.m == 0 {
		return ""
	}
	return fmt.Sprintf("%04o", uint32(*v.m))
}

func (v socketModeValue) Set(s string) error {
	m, err := decide.ParseSocketMode(s)
	if err != nil {
		return err
	}
	*v.m = m
	return nil
}

// decideSocketFlags registers the socket's and the wait's flags on fs,
// each name after prefix ("" for decide, "decide-" for serve).
func decideSocketFlags(fs *flag.FlagSet, o *server.DecideOptions, prefix string) {
	env := "CAPGATE_" + strings.ToUpper(strings.ReplaceAll(prefix, "-", "_"))
	fs.Var(socketModeValue{&o.Socket.Mode}, prefix+"socket-mode", "the unix socket's permission bits, an octal `mode` such as 0660 (the app's group may connect); set as the socket is created, never after. Default: what the umask leaves ("+env+"SOCKET_MODE)")
	fs.StringVar(&o.Socket.Group, prefix+"socket-group", "", "the unix socket's `group`, a name or id: the app's, with --"+prefix+"socket-mode 0660; the service must be a member of it ("+env+"SOCKET_GROUP)")
	fs.IntVar(&o.MaxWaiting, prefix+"max-waiting", decide.DefaultMaxWaiting, "the most calls of one API task that may wait in the service at once (each holds an app worker); past it a call that would wait is refused at once with Retry-After. Below the app's worker count: the default, 2, leaves 4 sync workers one for the user's running call and one free; 0: no bound ("+env+"MAX_WAITING)")
}

// decideTokenFlags registers the token flags on fs.
func decideTokenFlags(fs *flag.FlagSet, o *server.DecideOptions, env func(name, def string) string) {
	fs.StringVar(&o.Token, "decide-token", env("CAPGATE_DECIDE_TOKEN", ""), "the decision service's shared secret, sent as Authorization: Bearer; required on TCP unless --decide-no-token on a loopback address (CAPGATE_DECIDE_TOKEN)")
	fs.Var(boolValue{&o.NoToken}, "decide-no-token", "serve the decision service without a token on a loopback TCP address (a unix socket never needs one) (CAPGATE_DECIDE_NO_TOKEN)")
}

// DecideCommand is `capgate decide`: the decision service alone.
type DecideCommand struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
	// Ready, if set, gets the service's address once it listens (tests).
	Ready chan<- string
	// AdminReady, if set, gets the --admin-listen address, before Ready
	// (tests).
	AdminReady chan<- string
}

// Usage returns the command's help.
func (c *DecideCommand) Usage() string {
	return `Usage: capgate decide [flags]

Runs the decision service: an app (the Python package's Django middleware,
or any HTTP/1.1 client) asks POST /v1/calls whether a heavy call may run,
and holds its place while the connection stays open (docs/PROTOCOL.md). It
uses the same config, lanes, fair wait and log lines as serve,
with no upstream and no identity lookup: the app says who calls. --listen
unix:<path> needs no token; a TCP address needs --decide-token unless it is
loopback and --decide-no-token is given. --admin-listen serves GET /metrics,
/livez and /readyz, and with --staff-tokens the staff API and status page
(/capacity/) for those tokens' holders. Flags:
`
}

// decideFlags holds the parsed flag values of decide.
type decideFlags struct {
	fs        *flag.FlagSet
	st        *server.Settings
	o         *server.ServeOptions
	d         server.DecideOptions
	logFormat string
	migrate   bool
}

func (c *DecideCommand) flags() (*decideFlags, error) {
	fs, st, env, err := storeFlags("capgate decide", c.Getenv)
	if err != nil {
		return nil, err
	}
	f := &decideFlags{fs: fs, st: st, o: &server.ServeOptions{}}
	o := f.o
	fs.StringVar(&f.d.Listen, "listen", env("CAPGATE_DECIDE_LISTEN", "unix:capgate-decide.sock"), "where to serve the decision protocol: unix:<path> or host:port (CAPGATE_DECIDE_LISTEN)")
	decideTokenFlags(fs, &f.d, env)
	decideSocketFlags(fs, &f.d, "")
	fs.StringVar(&o.AdminListen, "admin-listen", env("CAPGATE_ADMIN_LISTEN", ""), "serve GET /metrics, /livez and /readyz on this address, and with --staff-tokens the staff API and status page under /capacity/ (CAPGATE_ADMIN_LISTEN)")
	fs.StringVar(&o.StaffTokens, "staff-tokens", env("CAPGATE_STAFF_TOKENS", ""), "a file of static staff tokens (the --tokens format, every entry \"is_staff\": true): with --admin-listen, the staff API and status page (/capacity/, /capacity/status/, config, history, rollback) for them only; reloaded on SIGHUP (CAPGATE_STAFF_TOKENS)")
	fs.StringVar(&o.LogFile, "log-file", env("CAPGATE_LOG_FILE", ""), "append the per-call log lines to this file instead of stdout (CAPGATE_LOG_FILE)")
	fs.StringVar(&o.CoreGroup, "core-group", env("CAPGATE_CORE_GROUP", ""), "the auth group of the core tier, for calls that send groups, in place of the policy's (CAPGATE_CORE_GROUP)")
	fs.StringVar(&o.EarlyGroup, "early-access-group", env("CAPGATE_EARLY_ACCESS_GROUP", ""), "the auth group of the early_access tier, in place of the policy's (CAPGATE_EARLY_ACCESS_GROUP)")
	o.LocalLanes = true
	fs.Var(boolValue{&o.LocalLanes}, "local-lanes", "with Redis: keep local lanes of this service's calls and apply degraded limits while Redis is unavailable (CAPGATE_LOCAL_LANES)")
	o.ShutdownTimeout = DefaultShutdownTimeout
	fs.Var(server.DurationValue{D: &o.ShutdownTimeout, Unit: time.Second}, "shutdown-timeout", "how long held calls' handlers may take to end after SIGTERM, a `duration` (CAPGATE_SHUTDOWN_TIMEOUT)")
	f.migrate = true
	fs.Var(boolValue{&f.migrate}, "migrate", "migrate the config database at start (CAPGATE_MIGRATE)")
	fs.StringVar(&f.logFormat, "log-format", env("CAPGATE_LOG_FORMAT", LogFormatText), "the operational logs' format on stderr, text or json (CAPGATE_LOG_FORMAT)")
	return f, nil
}

// Run serves until ctx is done (SIGTERM or SIGINT).
func (c *DecideCommand) Run(ctx context.Context, args []string) error {
	f, err := c.flags()
	if err != nil {
		return err
	}
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.Stdout, helpOf(c.Usage(), f.fs))
			return nil
		}
		return &UsageError{Msg: fmt.Sprintf("capgate decide: %v (capgate decide -h lists the flags)", err)}
	}
	if f.fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("capgate decide: unexpected argument %q (capgate decide -h lists the flags)", f.fs.Arg(0))}
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if _, err := applyEnv(f.fs, getenv); err != nil { // CAPGATE_<FLAG> for every flag, as serve
		return err
	}
	o := *f.o
	o.Settings = *f.st
	o.LogFormat, o.SkipMigrate = f.logFormat, !f.migrate
	logger, err := newLogger(o.LogFormat, c.Stderr)
	if err != nil {
		return err
	}
	setProcessLogger(ctx, logger)
	logger.Info("capgate settings", append([]any{"version", server.Version()}, effectiveSettings(f.fs)...)...)
	return server.RunDecider(ctx, o, f.d, c.Stdout, logger, c.Ready, c.AdminReady)
}
