package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capgate/capgate/server"
)

// migrateTimeout bounds `capgate migrate`.
const migrateTimeout = 2 * time.Minute

// MigrateCommand is `capgate migrate`: it creates or brings up to date the
// config database's schema, so the gateways can run as a database user
// without DDL rights (serve --migrate=false).
type MigrateCommand struct {
	Stdout, Stderr io.Writer
	// Getenv reads the settings' environment. Default os.Getenv.
	Getenv func(string) string
}

// Usage returns the command's help.
func (c *MigrateCommand) Usage() string {
	return `Usage: capgate migrate [--database URL]

Creates the config database's tables, or brings them up to date, and prints
{"database", "schema_version"}. Run it once per release with a user allowed
to change the schema; then the gateways need only read and insert rights
(capgate serve --migrate=false). Safe to run while gateways run, and from
several places at once. A sqlite: file is created if missing.

Flags:
`
}

// Run runs the migration.
func (c *MigrateCommand) Run(ctx context.Context, args []string) error {
	st, err := server.LoadSettings(c.Getenv)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("capgate migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&st.Database, "database", st.Database, "the config database: sqlite:<path> or postgres://… (CAPGATE_DATABASE)")
	var wait time.Duration
	fs.Var(server.DurationValue{D: &wait, Unit: time.Second}, "wait", "retry while the database does not answer, for up to this `duration` (a container started with it); 0 fails at once")
	if done, err := parseFlags(fs, args, c.Usage(), c.Stdout); done {
		return err
	}
	if fs.NArg() > 0 {
		return &UsageError{Msg: fmt.Sprintf("capgate migrate takes no arguments, got %q\n\n%s", fs.Arg(0), helpOf(c.Usage(), fs))}
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if _, err := applyEnv(fs, getenv); err != nil { // CAPGATE_DATABASE, CAPGATE_WAIT
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	store, err := server.ConnectConfigStore(ctx, st.Database)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := migrateWithin(ctx, store, wait, c.Stderr); err != nil {
		return err
	}
	v, err := store.DatabaseVersion(ctx)
	if err != nil {
		return err
	}
	return printJSON(c.Stdout, struct {
		Database      string `json:"database"`
		SchemaVersion int    `json:"schema_version"`
	}{server.MaskURL(st.Database), v})
}

// migrateRetry is how often migrate --wait tries again.
const migrateRetry = time.Second

// migrateWithin migrates, trying again every second for up to wait while
// it fails (the database is still starting), and returns the last error.
func migrateWithin(ctx context.Context, store server.MigratingStore, wait time.Duration, progress io.Writer) error {
	deadline := time.Now().Add(wait)
	for {
		err := store.Migrate(ctx)
		if err == nil || time.Now().Add(migrateRetry).After(deadline) {
			return err
		}
		fmt.Fprintf(progress, "capgate migrate: %v; trying again\n", err)
		t := time.NewTimer(migrateRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
