package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/test/internal/e2e"
	"github.com/capgate/capgate/tools/simapi"
)

// The rig: simapi's inference engine as the upstream (in this process, so
// the tests read what it ran), one `capgate serve` process in front of it
// with the example policy, tokens of the suite's users, in enforce for
// every caller (the default wait: a call to a full lane waits for a
// place), its config read on every call so the tests' changes apply at
// once. Started by the first test that needs it, stopped by TestMain.

// The suite's users: the example's, and a second pro user.
const tokens = `[
  {"token": "fay-token", "username": "fay", "auth_groups": []},
  {"token": "pat-token", "username": "pat", "auth_groups": ["pro"]},
  {"token": "pia-token", "username": "pia", "auth_groups": ["pro"]},
  {"token": "sam-token", "username": "sam", "is_staff": true, "auth_groups": []}
]`

// stepTime is the engine's time of a token of a batch of one: a call of
// 500 tokens alone takes about a second.
const stepTime = 2 * time.Millisecond

type rig struct {
	dir, bin, policy, db string
	gateway              string // http://host:port
	calls, access        string // the log files
	api                  *simapi.Inference
	procs                e2e.Procs
	up                   *httptest.Server
}

var (
	theRig  *rig
	rigErr  error
	rigOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theRig != nil {
		theRig.procs.Stop()
		theRig.up.Close()
		os.RemoveAll(theRig.dir)
	}
	os.Exit(code)
}

// missing says what the suite lacks to run, or "".
func missing() string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not installed"
	}
	if _, err := os.Stat(filepath.Join("node_modules", "openai", "package.json")); err != nil {
		return "the openai npm package is not installed in test/inference (scripts/openai-deps.sh installs it)"
	}
	return ""
}

// getRig returns the rig, started now if it is not yet, or skips t (fails
// it with CAPGATE_REQUIRE_OPENAI=1) when the client can't run.
func getRig(t *testing.T) *rig {
	t.Helper()
	if m := missing(); m != "" {
		if os.Getenv("CAPGATE_REQUIRE_OPENAI") == "1" {
			t.Fatal(m + "; CAPGATE_REQUIRE_OPENAI=1")
		}
		t.Skip(m)
	}
	rigOnce.Do(func() { theRig, rigErr = startRig() })
	if rigErr != nil {
		t.Fatal(rigErr)
	}
	return theRig
}

func startRig() (*rig, error) {
	ctx := context.Background()
	root, err := e2e.ModuleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "capgate-inference-")
	if err != nil {
		return nil, err
	}
	r := &rig{dir: dir, bin: filepath.Join(dir, "capgate"), policy: filepath.Join(root, "examples", "inference", "policy.yaml"),
		db: "sqlite:" + filepath.Join(dir, "c.db"), calls: filepath.Join(dir, "calls.log"), access: filepath.Join(dir, "access.log")}
	if err := e2e.BuildCapgate(ctx, root, r.bin); err != nil {
		return nil, err
	}
	tokFile := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	r.api = &simapi.Inference{Engine: &simapi.Engine{StepTime: stepTime, ChunkTokens: 8}, Latency: 200 * time.Millisecond,
		Ended: make(chan string, 1024)}
	r.up = httptest.NewServer(r.api)
	if out, err := e2e.Run(ctx, dir, nil, r.bin, "capacity", "set", "--create", "--database", r.db, "--policy", r.policy,
		"mode=enforce", "enforce_for=all", "--note", "the inference suite"); err != nil {
		return nil, fmt.Errorf("configure: %w: %s", err, out)
	}
	addr, err := e2e.SpareAddr()
	if err != nil {
		return nil, err
	}
	r.gateway = "http://" + addr
	logPath := filepath.Join(dir, "serve.log")
	if _, err := r.procs.Spawn(dir, nil, logPath, r.bin, "serve", "--listen", addr, "--upstream", r.up.URL,
		"--policy", r.policy, "--identity", "tokens", "--tokens", tokFile, "--database", r.db, "--task-id", "suite",
		"--config-cache", "0", "--drain-delay", "0", "--log-file", r.calls, "--access-log", r.access); err != nil {
		return nil, err
	}
	if err := e2e.WaitHTTP(ctx, r.gateway+"/livez", logPath); err != nil {
		return nil, err
	}
	return r, nil
}

// set changes the gateways' config, as staff do with the CLI; undo puts
// back each setting's value (the CLI's null, or a number) at cleanup.
func (r *rig) set(t *testing.T, undo []string, settings ...string) {
	t.Helper()
	args := append([]string{"capacity", "set", "--database", r.db, "--policy", r.policy}, settings...)
	if out, err := e2e.Run(t.Context(), r.dir, nil, r.bin, args...); err != nil {
		t.Fatalf("capacity set %v: %v: %s", settings, err, out)
	}
	if len(undo) > 0 {
		t.Cleanup(func() {
			args := append([]string{"capacity", "set", "--database", r.db, "--policy", r.policy}, undo...)
			if out, err := e2e.Run(context.Background(), r.dir, nil, r.bin, args...); err != nil {
				t.Errorf("capacity set %v: %v: %s", undo, err, out)
			}
		})
	}
}

// call is one call of a plan of client.mjs.
type call struct {
	Kind       string `json:"kind"` // chat or embeddings
	Model      string `json:"model"`
	MaxTokens  int    `json:"max_tokens,omitempty"`
	Stream     bool   `json:"stream,omitempty"`
	AbortAfter int    `json:"abortAfter,omitempty"`
	Input      any    `json:"input,omitempty"`
	DelayMS    int    `json:"delayMs,omitempty"`
	APIKey     string `json:"apiKey,omitempty"`     // the plan's when empty
	MaxRetries *int   `json:"maxRetries,omitempty"` // the plan's when nil
}

// outcome is what client.mjs says of a call.
type outcome struct {
	OK      bool              `json:"ok"`
	Status  int               `json:"status"`
	Code    string            `json:"code"`
	Type    string            `json:"type"`
	Name    string            `json:"name"`
	Error   string            `json:"error"`
	Chunks  int               `json:"chunks"`
	Data    int               `json:"data"`
	Headers map[string]string `json:"headers"`
	Usage   *struct {
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	MS       int `json:"ms"`
	Attempts int `json:"attempts"` // the requests the client sent, its retries included
}

// plan is client.mjs's argument.
type plan struct {
	BaseURL    string `json:"baseURL"`
	APIKey     string `json:"apiKey"`
	TimeoutMS  int    `json:"timeoutMs,omitempty"`
	MaxRetries *int   `json:"maxRetries,omitempty"`
	Calls      []call `json:"calls"`
}

// run runs the calls at once through the OpenAI client as the holder of
// token, and returns their outcomes in order.
func (r *rig) run(t *testing.T, p plan) []outcome {
	t.Helper()
	p.BaseURL = r.gateway + "/v1"
	arg, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs", string(arg))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\n%s%s", err, out.String(), errOut.String())
	}
	var res []outcome
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != len(p.Calls) {
		t.Fatalf("client.mjs printed %q (%v); want %d outcomes", out.String(), err, len(p.Calls))
	}
	return res
}

// ended waits, at most a generous 30 s, until the upstream has seen n
// calls end (answered or cut).
func (r *rig) ended(t *testing.T, n int) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for range n {
		select {
		case <-r.api.Ended:
		case <-timer.C:
			t.Fatalf("the upstream saw fewer than %d calls end within 30 s: %+v", n, r.api.Stats())
		}
	}
}

// drain forgets the calls the upstream saw end so far.
func (r *rig) drain() {
	for {
		select {
		case <-r.api.Ended:
		default:
			return
		}
	}
}

// line is a per-call log line of the gateway.
type line map[string]any

// lines returns the gateway's per-call lines of model.
func (r *rig) lines(t *testing.T, model string) []line {
	t.Helper()
	var out []line
	for _, l := range e2e.ReadLines[line](t, r.calls) {
		if l["model"] == model {
			out = append(out, l)
		}
	}
	return out
}

// modelInFlight returns the seats of model in flight as the status (staff)
// says.
func (r *rig) modelInFlight(t *testing.T, model string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", r.gateway+"/capacity/status/", nil)
	req.Header.Set("Authorization", "Bearer sam-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Model map[string]struct {
			InFlight int `json:"in_flight"`
		} `json:"model"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status: %d %v", resp.StatusCode, err)
	}
	return st.Model[model].InFlight
}
