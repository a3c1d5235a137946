package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The suites' Django sites (test/bypass/upstream's oclsim, test/decide/app's
// decidesite) share the Python package oclapi in test/internal/python: the
// settings every site has, OCL's $match and $rerank views around a
// site's own heavy run, and setup_db, which creates the users.

// Creds are the credentials setup_db prints: pam and pat are preview
// users, cora core, stan staff.
type Creds struct {
	Tokens   map[string]string `json:"tokens"`
	Sessions map[string]string `json:"sessions"`
	CSRF     string            `json:"csrf"`
}

// Token returns the Authorization header of user's token.
func (c *Creds) Token(user string) string {
	return "Authorization: Token " + c.Tokens[user]
}

// Session returns the headers of user's browser session: the session and
// CSRF cookies and the CSRF header DRF's SessionAuthentication checks.
func (c *Creds) Session(user string) []string {
	return []string{
		"Cookie: sessionid=" + c.Sessions[user] + "; csrftoken=" + c.CSRF,
		"X-CSRFToken: " + c.CSRF,
	}
}

// DjangoEnv returns the environment of a site whose settings module is
// settings: the test's, PYTHONPATH (oclapi's folder, then path), no
// bytecode files, then extra.
func DjangoEnv(root, settings string, path []string, extra ...string) []string {
	py := append([]string{filepath.Join(root, "test", "internal", "python")}, path...)
	env := append(os.Environ(), "PYTHONPATH="+strings.Join(py, ":"),
		"DJANGO_SETTINGS_MODULE="+settings, "PYTHONDONTWRITEBYTECODE=1")
	return append(env, extra...)
}

// SetUpUsers creates the site's database and users (oclapi.setup_db, in dir
// with env from DjangoEnv) and returns their credentials.
func SetUpUsers(ctx context.Context, dir string, env []string) (Creds, error) {
	var c Creds
	out, err := Run(ctx, dir, env, PythonBin, "-m", "oclapi.setup_db")
	if err != nil {
		return c, fmt.Errorf("set up the Django database: %w: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &c); err != nil {
		return c, fmt.Errorf("read the credentials: %w: %s", err, out)
	}
	return c, nil
}

// Gunicorn is how a suite serves its site: gthread workers, each with
// Threads threads.
type Gunicorn struct {
	Dir      string   // the working folder: the site's package is in it or on PYTHONPATH
	Env      []string // from DjangoEnv
	App      string   // the WSGI application, "site.wsgi:application"
	Addr     string   // host:port
	Workers  int
	Threads  int
	Log      string // gunicorn's output
	ReadyURL string // polled until it answers
}

// StartGunicorn starts g and waits until its ReadyURL answers.
func (p *Procs) StartGunicorn(ctx context.Context, g Gunicorn) (*exec.Cmd, error) {
	cmd, err := p.Spawn(g.Dir, g.Env, g.Log, "gunicorn", "--bind", g.Addr,
		"--workers", fmt.Sprint(g.Workers), "--worker-class", "gthread", "--threads", fmt.Sprint(g.Threads),
		"--timeout", "60", g.App)
	if err != nil {
		return nil, err
	}
	return cmd, WaitHTTP(ctx, g.ReadyURL, g.Log)
}
