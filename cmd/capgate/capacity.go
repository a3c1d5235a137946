package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/adaptive"
	"github.com/capgate/capgate/config"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/postgres"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/sqlite"
	"github.com/capgate/capgate/status"
)

// capacityHistoryDefault is history's default --limit.
const capacityHistoryDefault = 20

// capacityDrain bounds the wait for the config log line at exit.
const capacityDrain = 2 * time.Second

// CapacityCommand is "capgate capacity": it shows and changes the runtime
// config, opening the config store directly (as the gateway does). Output
// is JSON indented by 2 spaces on Stdout; the <log event>_config line of a
// change goes to Stderr.
type CapacityCommand struct {
	Stdout, Stderr io.Writer
	// Getenv reads the settings' environment. Default os.Getenv.
	Getenv func(string) string
}

// UsageError is a command line that can't be run; main exits 2 for it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usage returns the command's help.
func (c *CapacityCommand) Usage() string {
	return `Usage:
  capgate capacity show                        the config in force: {version, config}
  capgate capacity set <setting>=<value>... [--note TEXT] [--user NAME]
                                               merge a change: {version, changes}
  capgate capacity reset [--note TEXT] [--user NAME]
                                               back to the defaults: {version, changes}
  capgate capacity rollback [--to N] [--note TEXT] [--user NAME]
                                               roll back the last change (or, with
                                               --to N, restore version N) as a new
                                               version: {version, changes,
                                               rollback_of, undid}
  capgate capacity history [--limit N]         the changes, newest first (default 20)
  capgate capacity status                      the lanes in flight (needs Redis);
                                               exits 1 when a store fails

The database (--database, CAPGATE_DATABASE; default sqlite:capgate.db,
relative to the current directory) must exist: the CLI never makes a new
one by mistake. --create makes it (and its tables) when it is missing.

server.Settings are dotted paths (tiers.preview=1 mode=enforce); a value of digits
is a number, null removes a setting that may be absent (a key value's limit:
key_limits.model.large=null), anything else a string. Flags may come before or after the
assignments. A change that changes nothing adds no version.

--user records who made the change (default: the operating system user).
There is no user table: with --tokens FILE (the gateway's tokens file) the
name must be a username in it, else the name is recorded as given.

Run "capgate capacity <action> -h" for an action's flags.
`
}

// capacityAction is one action's flags and what it does.
type capacityAction struct {
	fs     *flag.FlagSet
	create bool
	note   string
	user   string
	tokens string
	limit  int
	to     int64
	st     server.Settings
}

// capacitySynopsis is each action's first line of help.
var capacitySynopsis = map[string]string{
	"show":     "capgate capacity show: print the config in force, {version, config}.",
	"set":      "capgate capacity set <setting>=<value>... [--note TEXT] [--user NAME]: merge a change, print {version, changes}.",
	"reset":    "capgate capacity reset [--note TEXT] [--user NAME]: go back to the defaults, print {version, changes}.",
	"rollback": "capgate capacity rollback [--to N] [--note TEXT] [--user NAME]: roll back the last change, or with --to N restore version N, as a new version (recorded as a change: who and why); print {version, changes, rollback_of, undid}. A rollback that would change nothing, or that would roll back a rollback, is refused with why (exit 1).",
	"history":  "capgate capacity history [--limit N]: print the changes, newest first, one JSON object each.",
	"status":   "capgate capacity status: print the lanes' calls in flight and limits (needs the lanes' Redis); exits 1 when a store fails.",
}

func (c *CapacityCommand) newAction(name string, st server.Settings) *capacityAction {
	a := &capacityAction{fs: flag.NewFlagSet("capgate capacity "+name, flag.ContinueOnError), st: st}
	a.fs.SetOutput(io.Discard)
	a.st.CLIStoreFlags(a.fs)
	a.fs.BoolVar(&a.create, "create", false, "make the database (and its tables) if it is missing; without it a missing database is an error")
	switch name {
	case "set", "reset", "rollback":
		if name == "rollback" {
			a.fs.Int64Var(&a.to, "to", 0, "the version to restore (see capgate capacity history); none: roll back the last change")
		}
		a.fs.StringVar(&a.note, "note", "", "why the change was made")
		a.fs.StringVar(&a.user, "user", "", "who made the change (default: the operating system user)")
		a.fs.StringVar(&a.tokens, "tokens", "", `the gateway's tokens file; --user must be a username in it`)
		a.st.LaneFlags(a.fs) // the lanes' Redis carries the change to the gateways at once
	case "history":
		a.fs.IntVar(&a.limit, "limit", capacityHistoryDefault, "how many versions, newest first")
	case "status":
		a.st.LaneFlags(a.fs) // every lane-store flag serve takes
		a.fs.Lookup("redis").Usage = "the lanes' Redis, redis://[:password@]host:port/db (CAPGATE_REDIS, CAPGATE_REDIS_URL, or REDIS_HOST, REDIS_PORT, REDIS_DB, REDIS_PASSWORD)"
	}
	return a
}

// parse parses flags wherever they are among the arguments, and returns
// the rest in order.
func (a *capacityAction) parse(args []string) ([]string, error) {
	var rest []string
	for {
		if err := a.fs.Parse(args); err != nil {
			return nil, err
		}
		args = a.fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest, args = append(rest, args[0]), args[1:]
	}
}

func (a *capacityAction) usage() string {
	name := strings.TrimPrefix(a.fs.Name(), "capgate capacity ")
	where := "Flags:\n"
	if name == "set" {
		where = "Flags (before or after the assignments):\n"
	}
	return helpOf(fmt.Sprintf("Usage: %s\n\n%s", capacitySynopsis[name], where), a.fs)
}

// Run runs "capgate capacity <action> ...". An error is the message to
// print; a *UsageError means the command line was wrong.
func (c *CapacityCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &UsageError{Msg: c.Usage()}
	}
	name, args := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.Stdout, c.Usage())
		return nil
	case "show", "set", "reset", "rollback", "history", "status":
	default:
		return &UsageError{Msg: fmt.Sprintf("capgate capacity: unknown action %q\n\n%s", name, c.Usage())}
	}
	st, err := server.LoadSettings(c.Getenv)
	if err != nil {
		return err
	}
	a := c.newAction(name, st)
	rest, err := a.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.Stdout, a.usage())
		return nil
	}
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, a.usage())}
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if _, err := applyEnv(a.fs, getenv); err != nil {
		return err
	}
	switch name {
	case "set":
		change, err := jsontree.ParseAssignments(rest)
		if err != nil {
			return err
		}
		return c.save(ctx, a, config.Edit{Set: change}, false)
	case "reset":
		return c.save(ctx, a, config.Edit{Replace: true}, false) // assignments are ignored
	case "rollback":
		named := false
		a.fs.Visit(func(f *flag.Flag) { named = named || f.Name == "to" })
		if a.to < 0 || (named && a.to == 0) {
			return &UsageError{Msg: fmt.Sprintf("capgate capacity rollback --to N: N is a version of the history\n\n%s", a.usage())}
		}
		return c.save(ctx, a, config.Edit{}, true)
	}
	if len(rest) > 0 {
		return &UsageError{Msg: fmt.Sprintf("capgate capacity %s takes no arguments, got %q\n\n%s", name, rest[0], a.usage())}
	}
	switch name {
	case "show":
		return c.withConfigs(ctx, a, func(svc *config.Service) error {
			v, cfg, err := svc.Current(ctx)
			if err != nil {
				return err
			}
			return c.print(struct {
				Version *int64          `json:"version"`
				Config  settings.Config `json:"config"`
			}{versionID(v), cfg})
		})
	case "history":
		return c.history(ctx, a)
	}
	return c.status(ctx, a)
}

// withConfigs opens the config store and runs fn with a service over it.
// It refuses a database that is missing, unless --create.
func (c *CapacityCommand) withConfigs(ctx context.Context, a *capacityAction, fn func(*config.Service) error) error {
	st := a.st
	if p := server.SQLitePath(st.Database); p != "" && !a.create {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			abs, _ := filepath.Abs(p)
			return fmt.Errorf("no config database at %s (--database %s): point --database or CAPGATE_DATABASE at the gateway's database, or pass --create to make a new one", abs, st.Database)
		}
	}
	store, err := server.ConnectConfigStore(ctx, st.Database)
	if err != nil {
		return err
	}
	defer store.Close()
	have, err := store.DatabaseVersion(ctx)
	if err != nil {
		return err
	}
	switch {
	case have == 0 && !a.create:
		return fmt.Errorf("the config database %s has no capgate tables: run capgate migrate --database …, or pass --create", server.MaskURL(st.Database))
	case have < server.LatestSchema(st.Database):
		if err := store.Migrate(ctx); err != nil {
			return err
		}
	}
	pol, err := st.LoadPolicy()
	if err != nil {
		return err
	}
	return fn(st.NewConfigService(store, pol))
}

// osUser names who runs the command, for created_by: the operating
// system user, else $USER, else the uid.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "uid:" + strconv.Itoa(os.Getuid())
}

// save saves change, filling in who made it, the source and the note; a
// rollback (of --to, or of the last change) when rollback is set.
func (c *CapacityCommand) save(ctx context.Context, a *capacityAction, change config.Edit, rollback bool) error {
	if a.user != "" && a.tokens != "" {
		if err := checkUser(a.tokens, a.user); err != nil {
			return err
		}
	}
	change.By, change.Source, change.Note = a.user, config.SourceCommand, a.note
	if change.By == "" {
		change.By = osUser() // never a null created_by
	}
	return c.withConfigs(ctx, a, func(svc *config.Service) error {
		sink := logsink.New(c.Stderr)
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), capacityDrain)
			defer cancel()
			sink.Close(ctx)
		}()
		svc.Sink = sink
		var res config.SaveResult
		var err error
		if rollback {
			res, err = svc.Rollback(ctx, a.to, change)
		} else {
			res, err = svc.Save(ctx, change)
		}
		if err != nil {
			return err
		}
		applies := ""
		if len(res.Diff) > 0 {
			applies = c.announce(ctx, a.st, res.Version.ID)
		}
		var rollbackOf, undid *int64
		if rollback && res.Version != nil && res.Version.RollbackOf != 0 {
			rollbackOf = &res.Version.RollbackOf
		}
		if res.Undid != 0 {
			undid = &res.Undid
		}
		return c.print(struct {
			Version    *int64        `json:"version"`
			Changes    settings.Diff `json:"changes"`
			RollbackOf *int64        `json:"rollback_of,omitempty"`
			Undid      *int64        `json:"undid,omitempty"`
			Applies    string        `json:"applies,omitempty"`
		}{versionID(res.Version), res.Diff, rollbackOf, undid, applies})
	})
}

// announce pushes a saved version to the gateways where it can (the
// lanes' Redis; PostgreSQL notified in the save itself) and says when the
// change applies.
func (c *CapacityCommand) announce(ctx context.Context, st server.Settings, version int64) string {
	poll := fmt.Sprintf("within each gateway's --config-cache (%s by default)", config.DefaultCacheTTL)
	var pushed []string
	if server.SQLitePath(st.Database) == "" {
		pushed = append(pushed, "PostgreSQL NOTIFY "+postgres.ConfigChannelName)
	} else {
		pushed = append(pushed, "SQLite's commit counter (the gateways on this file check it every "+sqlite.DataVersionInterval.String()+")")
	}
	if st.HasRedis() {
		pol, perr := st.LoadPolicy()
		if perr != nil {
			pol = policy.OCL() // withConfigs read it already: not expected
		}
		if lanes, err := redis.Open(st.RedisOptions()); err == nil {
			n, err := redis.NewConfigChannel(lanes, st.KeyPrefixOf(pol)).Publish(ctx, version)
			lanes.Close()
			if err == nil {
				pushed = append(pushed, fmt.Sprintf("Redis pub/sub (%d gateway(s) listening)", n))
			} else {
				fmt.Fprintf(c.Stderr, "capgate: the change could not be published on Redis (%v); the gateways pick it up %s\n", err, poll)
			}
		}
	}
	if len(pushed) == 0 {
		return "on every gateway " + poll + " (set --redis to push it at once)"
	}
	return "now: pushed through " + strings.Join(pushed, " and ") + "; a gateway that missed it, " + poll
}

func (c *CapacityCommand) history(ctx context.Context, a *capacityAction) error {
	return c.withConfigs(ctx, a, func(svc *config.Service) error {
		vs, err := svc.History(ctx, a.limit)
		if err != nil {
			return err
		}
		for _, v := range vs {
			// The staff API's form of a version, so both show it alike.
			if err := c.print(capgatehttp.NewHistoryEntry(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

// errNoLaneStore says why status needs Redis.
var errNoLaneStore = errors.New("capgate capacity status needs the lanes' Redis: set --redis or CAPGATE_REDIS_URL " +
	"(or REDIS_HOST, --redis-sentinels or --redis-cluster). In-process lanes live inside one gateway and can't be seen from " +
	"another process; ask that gateway instead: GET /capacity/status/.")

func (c *CapacityCommand) status(ctx context.Context, a *capacityAction) error {
	st := a.st
	if !st.HasRedis() {
		return errNoLaneStore
	}
	pol, err := st.LoadPolicy()
	if err != nil {
		return err
	}
	keyPrefix, err := st.LaneKeyPrefix(pol)
	if err != nil {
		return err
	}
	ro := st.RedisOptions()
	ro.KeyPrefix = keyPrefix
	lanes, err := redis.Open(ro)
	if err != nil {
		return err
	}
	defer lanes.Close()
	return c.withConfigs(ctx, a, func(svc *config.Service) error {
		_, cfg, err := svc.Current(ctx)
		if err != nil {
			return err
		}
		// A gate over the lanes, only to read them: it admits nothing and
		// runs no adaptive loop, but reads the cluster's adaptive state,
		// so the limits shown are those in force and the loop's advice.
		g, err := capgate.NewGate(lanes, settings.NewFixed(cfg), nil, st.TaskID)
		if err != nil {
			return err
		}
		defer func() { _ = g.Close(context.WithoutCancel(ctx)) }()
		g.KeyPrefix = keyPrefix
		if !cfg.Adaptive.Empty() {
			if err := (&adaptive.Runner{Gate: g}).Read(ctx); err != nil {
				return fmt.Errorf("read the adaptive limits: %w", err)
			}
		}
		snap := g.Status(ctx, cfg)
		if err := c.print(snap); err != nil {
			return err
		}
		if snap.Store != status.OK {
			// The JSON says it too; the exit code is for scripts.
			return fmt.Errorf("lane store %s: %s", lanes, snap.Store)
		}
		return nil
	})
}

// checkUser fails with `No user "<name>".` unless the tokens file names
// user. The file is read as the gateway reads it.
func checkUser(tokensFile, user string) error {
	entries, err := identity.ReadTokens(tokensFile)
	if err != nil {
		return fmt.Errorf("read --tokens: %w", err)
	}
	for _, e := range entries {
		if e.Username == user {
			return nil
		}
	}
	return fmt.Errorf("No user %q.", user)
}

func (c *CapacityCommand) print(v any) error { return printJSON(c.Stdout, v) }

func versionID(v *config.Version) *int64 {
	if v == nil {
		return nil
	}
	return &v.ID
}
