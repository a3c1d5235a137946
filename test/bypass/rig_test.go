package bypass

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// The rig: one gunicorn serving the Django upstream (test/bypass/upstream),
// and three `capgate serve` processes in front of it, one per identity
// mode, all in enforce with enforce_for all, preview users paused
// (per_user.preview 0) and core users at one call (per_user.core 1). It is
// started once, by the first test that needs it, and stopped by TestMain.

// gatewayID names one of the rig's gateways.
type gatewayID string

const (
	gwUpstream gatewayID = e2e.ViaUpstream // --identity upstream: asks Django's /user/
	gwHeader   gatewayID = e2e.ViaHeader   // --identity header, trusting a proxy range the tests are not in
	gwTokens   gatewayID = e2e.ViaTokens   // --identity tokens, the same tokens as Django's
)

// Gateway limits the suite sets, and the per-user limits they make.
var (
	// The wait is on (wait.max_seconds 2: short, so the suite stays
	// quick) unless CAPGATE_BYPASS_WAIT=off: the suite runs both ways in
	// CI. Paused users (pam, pat) never wait, so the attacks' statuses are
	// the same either way; cora's calls over her limit wait, then run or
	// are refused, and the invariants check the same limits.
	configArgs = []string{"mode=enforce", "enforce_for=all", "api_heavy.per_task=2", "per_user.preview=0", "per_user.core=1", "wait.max_seconds=" + waitSeconds()}
	// userLimit is the most heavy calls of each user the upstream may run
	// at once: pam and pat are preview (0), cora core (1), stan staff (4,
	// but per_task 2, set above, binds first).
	userLimit = map[string]int{"pam": 0, "pat": 0, "cora": 1, "stan": 2}
	staffUser = map[string]bool{"stan": true}
)

// waitSeconds is the rig's wait.max_seconds: 2, or 0 when
// CAPGATE_BYPASS_WAIT=off.
func waitSeconds() string {
	if os.Getenv("CAPGATE_BYPASS_WAIT") == "off" {
		return "0"
	}
	return "2"
}

// What the attacks send.
const (
	match   = e2e.Match
	oneRow  = e2e.OneRow
	jsonCT  = e2e.JSONCT
	refused = http.StatusTooManyRequests
)

// maxBodyBytes is the gateways' --max-body-bytes.
const maxBodyBytes = e2e.MaxBodyBytes

type rig struct {
	dir      string
	bin      string // the capgate binary
	record   string // the upstream's JSON lines of heavy runs
	upstream string // http://127.0.0.1:port
	gateways map[gatewayID]*gateway
	logs     []string // the gateways' ocl_capacity lines
	creds    e2e.Creds
	procs    *e2e.Procs
}

type gateway struct {
	id      gatewayID
	addr    string // host:port
	logFile string
}

// suite.Get(t) returns the running rig, starting it on first use. Without
// Django, DRF or gunicorn it skips the test, or fails it when
// CAPGATE_REQUIRE_BYPASS=1.
var suite = e2e.Suite[*rig]{Name: "bypass", Missing: e2e.MissingDjango,
	Start: func(ctx context.Context, s e2e.Setup) (*rig, error) {
		r := &rig{dir: s.Dir, procs: s.Procs, gateways: map[gatewayID]*gateway{}}
		return r, r.start(ctx, s.Root)
	}}

func TestMain(m *testing.M) { suite.Main(m) }

func (r *rig) start(ctx context.Context, root string) error {
	var err error
	// CAPGATE_BYPASS_BIN runs the suite against another build (say, main's,
	// to see the attacks land).
	r.bin = os.Getenv("CAPGATE_BYPASS_BIN")
	if r.bin == "" {
		r.bin = filepath.Join(r.dir, "capgate")
		if err := e2e.BuildCapgate(ctx, root, r.bin); err != nil {
			return err
		}
	}

	// The upstream: database and users first, then gunicorn.
	updir := filepath.Join(root, "test", "bypass", "upstream")
	r.record = filepath.Join(r.dir, "heavy.jsonl")
	env := e2e.DjangoEnv(root, "oclsim.settings", nil, "BYPASS_DIR="+r.dir, "BYPASS_RECORD="+r.record)
	if r.creds, err = e2e.SetUpUsers(ctx, updir, env); err != nil {
		return err
	}
	upAddr, err := e2e.SpareAddr()
	if err != nil {
		return err
	}
	r.upstream = "http://" + upAddr
	// One process, many threads: the record's in-flight counts are exact.
	if _, err := r.procs.StartGunicorn(ctx, e2e.Gunicorn{Dir: updir, Env: env, App: "oclsim.wsgi:application",
		Addr: upAddr, Workers: 1, Threads: 48, Log: filepath.Join(r.dir, "gunicorn.log"), ReadyURL: r.upstream + "/user/"}); err != nil {
		return err
	}

	tokens := filepath.Join(r.dir, "tokens.json")
	var entries []map[string]any
	for user, tok := range r.creds.Tokens {
		if user == "pat" {
			continue // a user the API knows and the tokens file does not
		}
		var groups []string
		if user == "cora" {
			groups = []string{"core_user"}
		}
		entries = append(entries, map[string]any{"token": tok, "username": user, "is_staff": staffUser[user], "auth_groups": groups})
	}
	b, _ := json.Marshal(entries)
	if err := os.WriteFile(tokens, b, 0o600); err != nil {
		return err
	}
	for id, extra := range map[gatewayID][]string{
		gwUpstream: {"--identity", "upstream"},
		gwHeader:   {"--identity", "header", "--trusted-proxies", "10.255.255.0/24"},
		gwTokens:   {"--identity", "tokens", "--tokens", tokens},
	} {
		args := append([]string{"--max-body-bytes", fmt.Sprint(maxBodyBytes), "--drain-delay", "0"}, extra...)
		if _, err := r.startGateway(ctx, id, configArgs, args...); err != nil {
			return err
		}
	}
	return nil
}

// startGateway configures gateway id (a config database of its own, with
// settings) and starts it, `capgate serve` in front of the upstream with
// args, and waits until it answers.
func (r *rig) startGateway(ctx context.Context, id gatewayID, settings []string, args ...string) (*gateway, error) {
	db := "sqlite:" + filepath.Join(r.dir, string(id)+".db")
	if err := e2e.Configure(ctx, r.bin, r.dir, db, "bypass suite", settings...); err != nil {
		return nil, err
	}
	addr, err := e2e.SpareAddr()
	if err != nil {
		return nil, err
	}
	g := &gateway{id: id, addr: addr, logFile: filepath.Join(r.dir, string(id)+".log")}
	args = append([]string{"serve", "--listen", addr, "--upstream", r.upstream, "--database", db,
		"--task-id", "bypass-" + string(id), "--log-file", g.logFile, "--shutdown-timeout", "2s"}, args...)
	stderr := filepath.Join(r.dir, string(id)+".stderr")
	if _, err := r.procs.Spawn(r.dir, nil, stderr, r.bin, args...); err != nil {
		return nil, err
	}
	if err := e2e.WaitHTTP(ctx, "http://"+addr+"/healthz", stderr); err != nil {
		return nil, err
	}
	r.gateways[id] = g
	r.logs = append(r.logs, g.logFile)
	return g, nil
}

// heavyRun is one heavy call the upstream ran (a line of its record).
type heavyRun struct {
	CID          string `json:"cid"`
	User         string `json:"user"`
	Staff        bool   `json:"staff"`
	Endpoint     string `json:"endpoint"`
	UserInFlight int    `json:"user_in_flight"`
	Path         string `json:"path"`
	Case         string `json:"case"` // the X-Test-Case header: which attack
}

// runs returns the heavy calls the upstream has run so far.
func (r *rig) runs(t *testing.T) []heavyRun {
	t.Helper()
	return e2e.ReadLines[heavyRun](t, r.record)
}
