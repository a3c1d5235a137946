package loadgen_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

// inferenceStack is the fake inference API behind a real gateway running
// the inference policy (examples/inference), callers from a tokens list:
// two of tier free, two of tier pro.
type inferenceStack struct {
	api   *simapi.Inference
	gw    *httptest.Server
	lines *mock.Sink
	users []loadgen.User
	p     *policy.Policy
}

func newInferenceStack(t *testing.T, mode settings.Mode) *inferenceStack {
	t.Helper()
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var entries []identity.TokenEntry
	var users []loadgen.User
	for _, u := range []struct{ name, group string }{{"free-1", ""}, {"free-2", ""}, {"pro-1", "pro"}, {"pro-2", "pro"}} {
		e := identity.TokenEntry{Token: u.name + "-token", Username: u.name}
		if u.group != "" {
			e.AuthGroups = []string{u.group}
		}
		entries = append(entries, e)
		users = append(users, loadgen.User{Name: u.name, Token: e.Token, Tier: p.Identity.TierOf(false, e.AuthGroups)})
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		t.Fatal(err)
	}
	api := &simapi.Inference{Latency: 150 * time.Millisecond}
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	// Two seats a model, whatever the model (a call of up to 512
	// tokens takes one), so the skewed models fill their lanes.
	cfg, _, err := settings.Default(p, mode).Apply(settings.Patch{"lanes": map[string]any{"model": 2},
		"key_limits": map[string]any{"model": map[string]any{"large": nil}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.EnforceFor = settings.EnforceAware // the client must say it is aware, in the policy's header
	cfg.RetryAfter = settings.RetryAfter{Base: 1, Max: 2, Paused: 5}
	cfg.Wait.MaxSeconds = 0 // the client waits out refusals
	lines := &mock.Sink{}
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), lines, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	classifier := &capgatehttp.Classifier{}
	classifier.SetPolicy(p)
	u, _ := url.Parse(up.URL)
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: u, Gate: gate, Identify: ids, Classifier: classifier})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return &inferenceStack{api: api, gw: srv, lines: lines, users: users, p: p}
}

// Under the inference policy, loadgen sends the policy's calls (bearer
// tokens, a JSON body with a model) and speaks its names: the gateway
// takes the client as capacity-aware and enforces, the client reads its
// refusals, and the API never runs more than a lane allows, per model and
// per caller, with no call failed.
func TestRoutesWorkloadUnderTheInferencePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for a few seconds")
	}
	s := newInferenceStack(t, settings.ModeEnforce)
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: s.gw.URL, Users: s.users, Policy: s.p, Duration: 3 * time.Second, Workers: 3, Grace: 15 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rep.Users {
		if u.RowsFailed != 0 || u.RowsCancelled != 0 || u.RowsDone == 0 {
			t.Errorf("%s: done %d failed %d cancelled %d (errors %v)", u.User, u.RowsDone, u.RowsFailed, u.RowsCancelled, u.Errors)
		}
	}
	if rep.Decisions["admitted"] == 0 || rep.Decisions["refused"] == 0 || rep.Decisions["shadow-refused"] != 0 {
		t.Errorf("decisions %v (the Capgate-Decision header); want calls admitted and refused, none shadow-refused: enforced for an aware client", rep.Decisions)
	}
	if rep.Capacity429["model"]+rep.Capacity429["user"] == 0 {
		t.Errorf("capacity 429s by scope %v; want the model and user lanes to fill", rep.Capacity429)
	}
	var kinds []string
	for _, l := range rep.Latencies {
		kinds = append(kinds, l.Kind)
	}
	if len(kinds) == 0 || len(kinds) > 3 {
		t.Errorf("latencies of %v; want the routes' (chat, completions, embeddings)", kinds)
	}
	st := s.api.Stats()
	if st.Peak > 8 {
		t.Errorf("the API ran %d calls at once, past the cluster lane's 8", st.Peak)
	}
	for model, peak := range st.PeakPerModel {
		if model != "small" && model != "large" || peak > 2 {
			t.Errorf("model %q: %d calls at once; want small or large, at most 2", model, peak)
		}
	}
	// The skewed models fill the lane of 2: the API saw two at once, or,
	// on a machine too loaded for two to overlap there, the gate refused
	// calls for the model lane.
	if st.PeakPerModel["small"] != 2 && rep.Capacity429["model"] == 0 {
		t.Errorf("model small ran %d at once and no call was refused for the model lane; the skewed models should fill its lane of 2", st.PeakPerModel["small"])
	}
	limit := map[string]int{"free-1-token": 1, "free-2-token": 1, "pro-1-token": 3, "pro-2-token": 3}
	for caller, peak := range st.PeakPerCaller {
		if l, ok := limit[caller]; !ok || peak > l {
			t.Errorf("caller %q: %d calls at once, limit %d", caller, peak, l)
		}
	}
	for _, l := range s.lines.All(t) {
		if l["event"] != s.p.Names.LogEvent {
			t.Fatalf("a log line of event %v", l["event"])
		}
	}
}

// In shadow the same load goes past the lanes, and the gateway says so
// without refusing anything.
func TestRoutesWorkloadShadow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for a few seconds")
	}
	s := newInferenceStack(t, settings.ModeShadow)
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: s.gw.URL, Users: s.users, Policy: s.p, Duration: 2 * time.Second, Workers: 3,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Throttled() != 0 || rep.Failed() != 0 || len(rep.Capacity429) != 0 {
		t.Fatalf("shadow: throttled %d failed %d 429s %v", rep.Throttled(), rep.Failed(), rep.Capacity429)
	}
	if rep.Decisions["shadow-refused"] == 0 {
		t.Fatalf("decisions %v: no call was shadow-refused", rep.Decisions)
	}
}

// The Mapper workload needs the built-in policy's routes.
func TestMapperWorkloadNeedsItsRoutes(t *testing.T) {
	p, err := policy.Load("../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = loadgen.Run(context.Background(), loadgen.Config{BaseURL: "http://127.0.0.1:1", Policy: p,
		Workload: loadgen.WorkloadMapper, Users: []loadgen.User{{Name: "a", Token: "t"}}}, nil)
	if err == nil {
		t.Fatal("the Mapper workload ran under the inference policy")
	}
}
