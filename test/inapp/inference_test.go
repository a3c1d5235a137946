package inapp

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// TestInferenceExampleInApp walks examples/inference/README.md's in-app
// part: the inference policy (user lane free 1, pro 3; model lane 2) in
// the Starlette app of examples/inference/app under uvicorn, asking
// `capgate decide`. The user and model limits hold at the view, a light
// call is never asked about, and with the service stopped the calls fail
// open.
func TestInferenceExampleInApp(t *testing.T) {
	need(t, []string{"uvicorn", "starlette"})
	build(t)
	dir := t.TempDir()
	app := filepath.Join(root, "examples", "inference", "app")
	svc := newService(t, dir, "examples/inference/policy.yaml", "mode=enforce", "enforce_for=all", "wait.max_seconds=0")
	if err := os.Mkdir(filepath.Join(dir, "run"), 0o750); err != nil {
		t.Fatal(err)
	}
	svc.start(t)
	record := filepath.Join(dir, "runs.jsonl")
	addr, err := e2e.SpareAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	env := append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1",
		"CAPGATE_URL=unix:"+svc.sock, "INFERENCE_RECORD="+record)
	ulog := filepath.Join(dir, "uvicorn.log")
	if _, err := procs.Spawn(app, env, ulog, e2e.PythonBin, "-m", "uvicorn", "--host", host, "--port", port,
		"--log-level", "warning", "server:app"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	if err := e2e.WaitHTTP(t.Context(), base+"/v1/models", ulog); err != nil {
		t.Fatal(err)
	}
	chat := func(token, model string) reply {
		return call(t, "POST", base+"/v1/chat/completions", "Bearer "+token, fmt.Sprintf(`{"model":%q,"messages":[]}`, model),
			"X-Demo-Seconds", "1.5")
	}

	t.Run("the user and model limits hold at the view", func(t *testing.T) {
		mark := lineCount(t, record)
		// fay (free: 1 at once) three times; pat (pro: 3) three times to
		// one model (2 at once).
		rs := together(6, func(i int) reply {
			if i < 3 {
				return chat("fay-token", "small")
			}
			return chat("pat-token", "large")
		})
		fay, pat := statuses(rs[:3]), statuses(rs[3:])
		if fay[200] != 1 || fay[429] != 2 || pat[200] != 2 || pat[429] != 1 {
			t.Errorf("fay %v, pat %v; want fay one 200 and two 429, pat two 200 and one 429", fay, pat)
		}
		scopes := map[string]int{}
		for _, r := range rs {
			if r.status != 429 {
				continue
			}
			// The policy's answer, the gateway's: OpenAI's error shape,
			// the lane that refused it in the RateLimit field.
			var body struct {
				Error struct{ Message, Code string }
			}
			_ = json.Unmarshal([]byte(r.body), &body)
			scope, _, _ := strings.Cut(r.header.Get("RateLimit"), ";")
			scopes[strings.Trim(scope, `"`)]++
			if r.header.Get("Capgate-Decision") != "refused" || body.Error.Code != "capacity_exceeded" ||
				!strings.HasPrefix(body.Error.Message, "The API is busy.") || r.header.Get("X-Should-Retry") != "true" {
				t.Errorf("a refusal: %v %s; want the policy's words and shape", r.header, r.body)
			}
		}
		if scopes["user"] != 2 || scopes["model"] != 1 {
			t.Errorf("refusals by scope %v; want user 2 (fay), model 1 (pat)", scopes)
		}
		runs := waitRuns(t, record, mark, 3)
		byUser := mostAtOnce(runs, func(l runLine) string { return l.User })
		byModel := mostAtOnce(runs, func(l runLine) string { return l.Model })
		if byUser["fay"] != 1 || byModel["large"] != 2 {
			t.Errorf("most at once: users %v, models %v; want fay 1, large 2", byUser, byModel)
		}
	})

	t.Run("a light call is never asked about", func(t *testing.T) {
		r := call(t, "GET", base+"/v1/models", "Bearer fay-token", "")
		if r.status != 200 || r.header.Get("Capgate-Decision") != "" {
			t.Errorf("GET /v1/models: %d %v; want 200, no capacity headers", r.status, r.header)
		}
	})

	t.Run("the service stopped: calls fail open", func(t *testing.T) {
		failsOpen(t, svc, record, func() reply { return chat("fay-token", "small") })
	})
}
