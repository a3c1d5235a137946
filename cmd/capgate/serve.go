package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
)

// DefaultShutdownTimeout is how long serve lets calls in flight finish
// after SIGTERM.
const DefaultShutdownTimeout = 30 * time.Second

// ServeCommand is `capgate serve`: the gateway in front of an API.
type ServeCommand struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
	// Environ lists the environment, for refusing a CAPGATE_ variable no
	// flag reads. Default os.Environ; with Getenv set and Environ nil, no
	// variable is refused.
	Environ func() []string
	// Ready, if set, gets the gateway's address once it listens (tests).
	Ready chan<- string
}

// Usage returns the command's help.
func (c *ServeCommand) Usage() string {
	return `Usage: capgate serve --upstream URL [flags]

Runs the gateway: a reverse proxy in front of the API at --upstream that
gates its heavy calls, serves the staff API under /capacity/, GET /metrics
and the probes GET /livez and GET /readyz (/healthz: /livez), and writes
one JSON line per gated call (event: the policy's log_event) to stdout (or --log-file). SIGHUP reopens --log-file and reloads --tokens, --jwks and --policy. A
sqlite: database is created if missing (its absolute path is logged at start);
the gateway starts even when the database is down, on the defaults. Every
flag also reads the environment variable CAPGATE_<FLAG> (--redis-cluster:
CAPGATE_REDIS_CLUSTER; some also the original's names, in their help); an
invalid value, or a CAPGATE_ variable no flag reads, refuses to start. Flags:
`
}

// serveFlags holds the parsed flag values until they are checked.
type serveFlags struct {
	fs        *flag.FlagSet
	st        *server.Settings
	o         *server.ServeOptions
	maxHeader int64
	// Start-up and operations (ops).
	logFormat string
	migrate   bool
}

// flags registers every flag of serve, defaulting to the environment.
func (c *ServeCommand) flags() (*serveFlags, error) {
	fs, st, env, err := storeFlags("capgate serve", c.Getenv)
	if err != nil {
		return nil, err
	}
	f := &serveFlags{fs: fs, st: st, o: &server.ServeOptions{}}
	o := f.o
	fs.StringVar(&o.Listen, "listen", env("CAPGATE_LISTEN", "127.0.0.1:8080"), "address to serve the gateway on (CAPGATE_LISTEN)")
	fs.StringVar(&o.AdminListen, "admin-listen", env("CAPGATE_ADMIN_LISTEN", ""), "serve the staff API, /metrics and the probes only on this address (CAPGATE_ADMIN_LISTEN)")
	fs.StringVar(&o.Upstream, "upstream", env("CAPGATE_UPSTREAM", ""), "the API, e.g. http://127.0.0.1:8000 (CAPGATE_UPSTREAM; required)")
	fs.StringVar(&o.Identity, "identity", env("CAPGATE_IDENTITY", ""), "how callers are identified: upstream, header, tokens or jwt (CAPGATE_IDENTITY; default: the policy's identity.resolver, upstream for the built-in policy)")
	fs.StringVar(&o.Tokens, "tokens", env("CAPGATE_TOKENS", ""), "the tokens file for --identity tokens (CAPGATE_TOKENS)")
	fs.StringVar(&o.JWKS, "jwks", env("CAPGATE_JWKS", ""), "the JSON Web Key Set `file` for --identity jwt, reloaded on SIGHUP (CAPGATE_JWKS)")
	fs.StringVar(&o.TrustedProxies, "trusted-proxies", env("CAPGATE_TRUSTED_PROXIES", ""), "comma-separated CIDRs of proxies whose X-Forwarded-* and X-Capgate-* headers are trusted (CAPGATE_TRUSTED_PROXIES)")
	fs.StringVar(&o.PathPrefix, "path-prefix", env("CAPGATE_PATH_PREFIX", ""), "where the API is mounted, e.g. /api (CAPGATE_PATH_PREFIX)")
	o.MaxBodyBytes = capgatehttp.DefaultMaxBodyBytes
	fs.Var(bytesValue{&o.MaxBodyBytes}, "max-body-bytes", "the most `bytes` of a body read to classify it, such as 65536 or 64KiB; a larger heavy-path body is gated as bulk (CAPGATE_MAX_BODY_BYTES)")
	fs.StringVar(&o.CORSOrigins, "cors-origins", env("CAPGATE_CORS_ORIGINS", ""), "comma-separated origins allowed, with credentials, on the gateway's own 429; default: echo the request's Origin without credentials (CAPGATE_CORS_ORIGINS)")
	fs.StringVar(&o.LogFile, "log-file", env("CAPGATE_LOG_FILE", ""), "append the per-call log lines to this file instead of stdout (CAPGATE_LOG_FILE)")
	o.ShutdownTimeout = DefaultShutdownTimeout
	fs.Var(server.DurationValue{D: &o.ShutdownTimeout, Unit: time.Second}, "shutdown-timeout", "how long calls in flight may finish after SIGTERM and the drain delay, a `duration` such as 30s or a number of seconds; calls still running then are cut (their lines say error shutdown, their leases are released) and the exit code is 1 (CAPGATE_SHUTDOWN_TIMEOUT)")
	o.DrainDelay = server.DefaultDrainDelay
	fs.Var(server.DurationValue{D: &o.DrainDelay, Unit: time.Second}, "drain-delay", "after SIGTERM, how long /readyz answers 503 while the gateway still serves, before it stops accepting, a `duration` such as 5s or a number of seconds: all of it when a readiness probe asked /readyz in the last minute, else only while calls are in flight; a second SIGTERM or SIGINT skips it and exits at once (CAPGATE_DRAIN_DELAY)")
	o.RestartHold = journal.DefaultHold
	fs.Var(server.DurationValue{D: &o.RestartHold, Unit: time.Second}, "restart-hold", "with Redis: how long after start, at the earliest, the gateway releases the leases a dead predecessor (the same --task-id and --listen, its liveness in Redis lapsed about 1 s after it stopped, or it said goodbye) left, a `duration` such as 1s or a number of seconds. A predecessor still alive (draining after SIGTERM, or a twin on another host) is never released. Short: the places of its calls that ended are free soon, and a call the API still runs goes uncounted until it ends; long (up to lease_seconds): those places stay taken this long, every call it had counted (CAPGATE_RESTART_HOLD)")
	fs.StringVar(&o.CoreGroup, "core-group", env("CAPGATE_CORE_GROUP", ""), "the auth group of the core tier, in place of the policy's (CAPGATE_CORE_GROUP)")
	o.LocalLanes = true
	fs.Var(boolValue{&o.LocalLanes}, "local-lanes", "with Redis: keep local lanes of this gateway's calls, refuse what they find full, and apply degraded limits while Redis is unavailable (CAPGATE_LOCAL_LANES)")
	fs.StringVar(&o.EarlyGroup, "early-access-group", env("CAPGATE_EARLY_ACCESS_GROUP", ""), "the auth group of the early_access tier, in place of the policy's (CAPGATE_EARLY_ACCESS_GROUP)")
	// Request-front hardening (docs/SECURITY.md).
	o.MaxBufferedBytes = capgatehttp.DefaultMaxBufferedBytes
	fs.Var(bytesValue{&o.MaxBufferedBytes}, "max-buffered-bytes", "the most request `bytes` (such as 32MiB) held to classify calls, across all calls in flight, request headers included; past it a heavy call gets 503 with Retry-After (CAPGATE_MAX_BUFFERED_BYTES)")
	f.maxHeader = capgatehttp.DefaultMaxHeaderBytes
	fs.Var(bytesValue{&f.maxHeader}, "max-header-bytes", "the most `bytes` (such as 64KiB) of one request's header (request line and headers); a larger one gets 431 (CAPGATE_MAX_HEADER_BYTES)")
	fs.StringVar(&o.UpgradePaths, "upgrade-paths", env("CAPGATE_UPGRADE_PATHS", ""), "comma-separated path prefixes where a connection upgrade (WebSocket) is passed on; never h2c, never the heavy paths (CAPGATE_UPGRADE_PATHS)")
	fs.StringVar(&o.MetricsToken, "metrics-token", env("CAPGATE_METRICS_TOKEN", ""), "a static bearer token that may read /metrics without the identity lookup; best set through the environment (CAPGATE_METRICS_TOKEN)")
	fs.StringVar(&o.StaffTokens, "staff-tokens", env("CAPGATE_STAFF_TOKENS", ""), "a file of static staff tokens (the --tokens format, every entry \"is_staff\": true) for the staff API and /metrics, taken before the identity lookup, so they work while the API is down; reloaded on SIGHUP (CAPGATE_STAFF_TOKENS)")
	fs.StringVar(&o.AccessLog, "access-log", env("CAPGATE_ACCESS_LOG", ""), "append one JSON line per request (request id, method, path, status, class, bytes, duration) to this file; reopened on SIGHUP (CAPGATE_ACCESS_LOG)")
	fs.Var(boolValue{&o.PublicMetrics}, "public-metrics", "serve /metrics to anyone, not only staff, when there is no --admin-listen (CAPGATE_PUBLIC_METRICS)")

	// Start-up and operations (ops).
	f.migrate = true
	fs.Var(boolValue{&f.migrate}, "migrate", "migrate the config database at start (retried in the background while it is down); false: leave it to capgate migrate, for a database user without DDL rights (CAPGATE_MIGRATE)")
	fs.StringVar(&f.logFormat, "log-format", env("CAPGATE_LOG_FORMAT", LogFormatText), "the operational logs' format on stderr, text or json; the per-call log lines are always JSON (CAPGATE_LOG_FORMAT)")
	// The decision service beside the gateway (decide.go).
	fs.StringVar(&o.Decide.Listen, "decide-listen", env("CAPGATE_DECIDE_LISTEN", ""), "also serve the decision protocol (docs/PROTOCOL.md) on unix:<path> or host:port (CAPGATE_DECIDE_LISTEN)")
	decideTokenFlags(fs, &o.Decide, env)
	decideSocketFlags(fs, &o.Decide, "decide-")
	return f, nil
}

// effectiveSettings lists every flag's value in force, for the start-up
// log line; URLs (Redis, the database) have their passwords masked.
func effectiveSettings(fs *flag.FlagSet) []any {
	var kv []any
	fs.VisitAll(func(f *flag.Flag) {
		v := server.MaskURL(f.Value.String())
		if server.SecretFlags[f.Name] && v != "" {
			v = "***"
		}
		kv = append(kv, f.Name, v)
	})
	return kv
}

// afterBoolFlag explains an unexpected argument that follows a boolean
// flag: "--public-metrics false" is the flag and an argument; it must be
// written --public-metrics=false.
func afterBoolFlag(fs *flag.FlagSet, args []string) string {
	rest := len(args) - fs.NArg()
	if rest < 1 {
		return ""
	}
	name := strings.TrimLeft(args[rest-1], "-")
	fl := fs.Lookup(name)
	if fl == nil {
		return ""
	}
	if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
		return ""
	}
	return fmt.Sprintf(" after --%s, which takes no separate value: write --%s=%s", name, name, fs.Arg(0))
}

func (f *serveFlags) help(usage string) string { return helpOf(usage, f.fs) }

// parsedServe are serve's options as parsed, with where each came from
// (for errors) and every flag's value (for the start-up log line).
type parsedServe struct {
	server.ServeOptions
	envSrc    envSources // the flags set from the environment, for errors
	effective []any      // every flag's value, for the start-up log line
}

// parse reads the flags over the environment's settings.
func (c *ServeCommand) parse(args []string) (parsedServe, error) {
	f, err := c.flags()
	if err != nil {
		return parsedServe{}, err
	}
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.Stdout, f.help(c.Usage()))
			return parsedServe{}, err
		}
		// One line: the flag and why; -h has the rest.
		msg := strings.ReplaceAll(err.Error(), "flag -", "flag --")
		return parsedServe{}, &UsageError{Msg: fmt.Sprintf("capgate serve: %s (capgate serve -h lists the flags)", msg)}
	}
	if f.fs.NArg() > 0 {
		return parsedServe{}, &UsageError{Msg: fmt.Sprintf("capgate serve: unexpected argument %q%s (capgate serve -h lists the flags)",
			f.fs.Arg(0), afterBoolFlag(f.fs, args))}
	}
	getenv, environ := c.Getenv, c.Environ
	if getenv == nil {
		getenv = os.Getenv
		if environ == nil {
			environ = os.Environ
		}
	}
	src, err := applyEnv(f.fs, getenv)
	if err != nil {
		return parsedServe{}, err
	}
	if environ != nil {
		if err := unknownEnv(f.fs, environ()); err != nil {
			return parsedServe{}, err
		}
	}
	o := parsedServe{ServeOptions: *f.o}
	o.Settings = *f.st
	o.envSrc = src
	o.LogFormat = f.logFormat
	o.SkipMigrate = !f.migrate
	if _, err := newLogger(o.LogFormat, io.Discard); err != nil {
		return o, src.name(err)
	}
	if f.maxHeader <= 0 || f.maxHeader > 1<<30 {
		return o, src.name(fmt.Errorf("--max-header-bytes %d: want a positive number of bytes, at most 1GiB", f.maxHeader))
	}
	o.MaxHeaderBytes = int(f.maxHeader)
	if o.Tokens != "" {
		id := o.Identity
		if id == "" { // the policy's resolver
			p, err := o.LoadPolicy()
			if err != nil {
				return o, src.name(err)
			}
			id = o.IdentityOf(p)
		}
		if id != "tokens" {
			return o, src.name(fmt.Errorf("--tokens needs --identity tokens (the identity is %q): set both, or neither", id))
		}
	}
	o.effective = effectiveSettings(f.fs)
	return o, nil
}

// Run serves until ctx is done (SIGTERM or SIGINT), then shuts down
// gracefully and drains the log sink.
func (c *ServeCommand) Run(ctx context.Context, args []string) error {
	o, err := c.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	logger, err := newLogger(o.LogFormat, c.Stderr)
	if err != nil {
		return err
	}
	setProcessLogger(ctx, logger)
	logger.Info("capgate settings", append([]any{"version", server.Version()}, o.effective...)...)
	if o.Mode == settings.ModeEnforce {
		logger.Info("boot mode enforce: the defaults refuse enforced calls until staff change the config")
	}
	// A second SIGTERM or SIGINT ends the shutdown at once.
	force := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				// The first one also ended ctx (processMain).
				if n++; n == 2 {
					logger.Warn("second signal: cutting the calls in flight and exiting")
					close(force)
					return
				}
			case <-ended:
				return
			}
		}
	}()
	o.Force = force
	srv, err := server.NewServer(ctx, o.ServeOptions, c.Stdout, logger)
	if err != nil {
		return o.envSrc.name(err)
	}
	defer func() {
		if cerr := srv.Close(); cerr != nil {
			logger.Warn("close", "error", cerr)
		}
	}()
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var admin net.Listener
	if o.AdminListen != "" {
		if admin, err = net.Listen("tcp", o.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	waitDecide, err := server.StartDecide(ctx, o.Decide, srv.Gate, srv.Repeater, o.ShutdownTimeout, logger)
	if err != nil {
		ln.Close()
		if admin != nil {
			admin.Close()
		}
		return err
	}
	defer func() { _ = waitDecide() }() // before the gate closes (the deferred srv.Close)
	logger.Info("capgate serving", "listen", ln.Addr().String(), "upstream", server.MaskURL(o.Upstream),
		"task", o.TaskID, "identity", srv.Identity())
	if c.Ready != nil {
		c.Ready <- ln.Addr().String()
	}
	// SIGHUP: reopen the log file, reload the tokens file, the JWKS and
	// the policy.
	defer server.ReloadOnHUP(ctx, srv.Reload)()
	return srv.Serve(ctx, ln, admin)
}
