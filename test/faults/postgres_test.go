//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgBin is where Debian puts the PostgreSQL 15 server binaries.
const pgBin = "/usr/lib/postgresql/15/bin"

// pgCluster is a PostgreSQL instance of the suite's own: initdb into a
// temporary directory as the postgres user, on a spare loopback port. The
// machine's own cluster (5432) is never touched.
type pgCluster struct {
	root, data, sock string
	port             int
	cred             *syscall.Credential
	cmd              *exec.Cmd
	done             chan struct{}
	log              *tailBuffer
}

// startPostgres initdbs and starts a cluster; the caller owns stop and
// remove.
func startPostgres(ctx context.Context) (*pgCluster, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	root, err := os.MkdirTemp("", "capgate-faults-pg-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	c := &pgCluster{root: root, data: filepath.Join(root, "data"), sock: filepath.Join(root, "sock"),
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, log: &tailBuffer{}}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, fmt.Errorf("chmod: %w", err)
	}
	for _, d := range []string{c.data, c.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, fmt.Errorf("mkdir: %w", err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, fmt.Errorf("chown: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(pgBin, "initdb"), "-D", c.data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return c, fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 10))
	}
	if c.port, err = sparePort(); err != nil {
		return c, err
	}
	return c, c.start(ctx)
}

// start starts the server (again) and waits until it accepts connections.
func (c *pgCluster) start(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(pgBin, "postgres"), "-D", c.data, "-p", itoa(c.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.sock,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = c.root
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd = cmd
	c.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.done) }()
	_, err := waitFor(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited: %s", lastLines(c.log.String(), 10))
		default:
		}
		_, err := run(ctx, filepath.Join(pgBin, "pg_isready"), "-h", "127.0.0.1", "-p", itoa(c.port), "-q")
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres on %d: %w", c.port, err)
	}
	return nil
}

// stop stops the server: SIGINT (fast shutdown), then SIGKILL to the group
// after 10 s.
func (c *pgCluster) stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGCONT)
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	// Children that outlived the postmaster (none expected).
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
}

// remove stops the server and deletes its files.
func (c *pgCluster) remove() {
	c.stop()
	_ = os.RemoveAll(c.root)
}

// url is the connection URL of database db.
func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// psql runs SQL in database db.
func (c *pgCluster) psql(ctx context.Context, db, sql string) (string, error) {
	return run(ctx, filepath.Join(pgBin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", itoa(c.port), "-U", "postgres", "-d", db, "-c", sql)
}

// createDB creates a fresh database and returns its URL.
func (c *pgCluster) createDB(ctx context.Context, db string) (string, error) {
	if _, err := c.psql(ctx, "postgres", "DROP DATABASE IF EXISTS "+db); err != nil {
		return "", err
	}
	if _, err := c.psql(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
		return "", err
	}
	return c.url(db), nil
}

// quoteSQL quotes s as an SQL string literal.
func quoteSQL(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
