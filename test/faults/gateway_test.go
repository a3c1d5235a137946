//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gateway is one `capgate serve` process.
type gateway struct {
	*proc
	task, addr, logFile string
	args                []string
	env                 []string
}

// gwOptions say how to start a gateway. Upstream and Database are required;
// Redis (a URL) or Sentinels+Master are optional (none: in-process lanes).
type gwOptions struct {
	Task      string
	Upstream  string
	Redis     string
	Sentinels string
	Master    string
	Database  string
	Mode      string
	Env       []string  // more environment, KEY=VALUE
	Args      []string  // more flags
	Stdout    io.Writer // default: a log file, --log-file
}

// startGateway starts `capgate serve` on a spare port and waits until it
// answers HTTP. The config cache is 1 s unless opts.Env sets it.
func startGateway(t testing.TB, o gwOptions) *gateway {
	t.Helper()
	g := &gateway{task: o.Task, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	args := []string{"serve", "--listen", g.addr, "--upstream", o.Upstream, "--database", o.Database,
		"--task-id", o.Task, "--shutdown-timeout", "5s",
		// No drain phase: the scenarios time the exit after SIGTERM.
		"--drain-delay", "0"}
	if o.Redis != "" {
		args = append(args, "--redis", o.Redis)
	}
	if o.Sentinels != "" {
		args = append(args, "--redis-sentinels", o.Sentinels, "--redis-master", o.Master)
	}
	if o.Mode != "" {
		args = append(args, "--mode", o.Mode)
	}
	if o.Stdout == nil {
		g.logFile = filepath.Join(t.TempDir(), o.Task+".log")
		args = append(args, "--log-file", g.logFile)
	}
	args = append(args, o.Args...)
	g.args = args
	g.env = envWith(append([]string{"CAPACITY_CONFIG_CACHE_SECONDS=1"}, o.Env...)...)
	g.start(t, o.Stdout)
	return g
}

func (g *gateway) start(t testing.TB, stdout io.Writer) {
	t.Helper()
	cmd := exec.Command(capgateBin, g.args...)
	cmd.Env = g.env
	if stdout != nil {
		cmd.Stdout = stdout
		cmd.Stderr = &tailBuffer{}
	}
	g.proc = startProc(t, "gateway "+g.task, cmd)
	if _, err := waitFor(context.Background(), 30*time.Second, 50*time.Millisecond, func() error {
		if g.exited() {
			return fmt.Errorf("exited: %v", g.err)
		}
		resp, err := http.Get("http://" + g.addr + "/livez")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}); err != nil {
		out := ""
		if g.out != nil {
			out = g.out.String()
		} else if b, ok := cmd.Stderr.(*tailBuffer); ok {
			out = b.String()
		}
		t.Fatalf("gateway %s did not come up (capgate %s): %v\n%s\n%s", g.task, strings.Join(g.args, " "), err,
			lastLines(out, 20), flagHint)
	}
}

// flagHint explains a gateway that does not start.
const flagHint = `The fault suite needs "capgate serve" with the flags of README.md's Settings
(--listen --upstream --redis --redis-sentinels --redis-master --database --task-id --mode
--identity --tokens --log-file --shutdown-timeout). Merge main once serve has landed.`

// url is the gateway's base URL.
func (g *gateway) url() string { return "http://" + g.addr }

// logLines returns the lines of the gateway's log file.
func (g *gateway) logLines(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(g.logFile)
	if err != nil {
		t.Fatalf("read log of %s: %v", g.task, err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// capacity runs `capgate capacity <args> --database db` and returns its
// output.
func capacity(t testing.TB, db string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := run(ctx, capgateBin, append(append([]string{"capacity"}, args...), "--database", db)...)
	if err != nil {
		t.Fatalf("capgate capacity: %v", err)
	}
	return out
}

// setConfig changes the config in force by kv ("k=v"), through the CLI as
// an operator would.
func setConfig(t testing.TB, db string, kv ...string) {
	t.Helper()
	// --create: the suite's databases are new; the CLI makes no database
	// unless told to.
	capacity(t, db, append(append([]string{"set"}, kv...), "--note", "fault suite", "--user", "faults", "--create")...)
}

// logErrors logs the distinct errors in a gateway's ocl_capacity lines.
func logErrors(t testing.TB, g *gateway) {
	t.Helper()
	b, err := os.ReadFile(g.logFile)
	if err != nil {
		return
	}
	seen := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var rec struct {
			Decision string `json:"decision"`
			Error    string `json:"error"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Error != "" {
			seen[rec.Decision+": "+rec.Error]++
		}
	}
	for e, n := range seen {
		t.Logf("%s log: %d× %s", g.task, n, e)
	}
}
