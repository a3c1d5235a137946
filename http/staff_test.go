package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/sqlite"
	"github.com/capgate/capgate/status"
)

// tokens is an Identifier from a map of "Token <t>" or "Bearer <t>"
// credentials, as identity.Tokens reads them; the token "broken" makes the
// lookup fail.
type tokens map[string]identity.Caller

func (m tokens) Identify(_ context.Context, r *http.Request) (identity.Caller, bool, error) {
	auth := r.Header.Get("Authorization")
	t, ok := strings.CutPrefix(auth, "Token ")
	if !ok {
		t, ok = strings.CutPrefix(auth, "Bearer ")
	}
	if !ok {
		return identity.Caller{}, false, nil
	}
	if t == "broken" {
		return identity.Caller{}, false, errors.New("identity lookup timed out")
	}
	c, ok := m[t]
	return c, ok, nil
}

type staffServer struct {
	*httptest.Server
	store   *sqlite.Store
	configs *config.Service
}

func newStaffServer(t *testing.T) *staffServer {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "capgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	configs := newConfigService(store)
	ids := tokens{
		"staff-token": {UserID: "root", Staff: true},
		"user-token":  {UserID: "alice", Groups: []string{"core_user"}},
	}
	gate, err := capgate.NewGate(memory.New(nil), configs, nil, "task1")
	if err != nil {
		t.Fatal(err)
	}
	h := capgatehttp.NewStaffHandler(configs, ids)
	h.Status = gate.Status
	h.Logger = slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &staffServer{Server: srv, store: store, configs: configs}
}

// do sends a request and returns the status, headers and decoded body.
func (s *staffServer) do(t *testing.T, method, path, token, body string) (int, http.Header, any) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Token "+token)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q; want application/json", method, path, ct)
	}
	got, err := jsontree.Parse(b)
	if err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, b, err)
	}
	return resp.StatusCode, resp.Header, got
}

// newConfigService returns the config service over store the staff tests
// use: boot mode shadow, a fixed clock, and its log lines and messages
// dropped. (configtest.Service, which the staff tests used, does not build
// on package settings yet.)
func newConfigService(store config.Store) *config.Service {
	s := config.NewService(store, settings.ModeShadow)
	s.Now = func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	s.Sink, s.Logger = &mock.Sink{}, slog.New(slog.DiscardHandler)
	s.ReadTimeout = 10 * time.Second
	return s
}

// configRows returns how many config versions store holds.
func configRows(tb testing.TB, store config.Store) int {
	tb.Helper()
	vs, err := store.History(context.Background(), 1000)
	if err != nil {
		tb.Fatalf("History: %v", err)
	}
	return len(vs)
}

// marshal returns v as JSON.
func marshal(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

func (s *staffServer) rows(t *testing.T) int { return configRows(t, s.store) }

func wantBody(t *testing.T, what string, got any, want string) {
	t.Helper()
	if g, w := marshal(t, got), marshal(t, mustDoc(t, want)); g != w {
		t.Errorf("%s = %s; want %s", what, g, w)
	}
}

func mustDoc(t *testing.T, text string) any {
	t.Helper()
	v, err := jsontree.Parse([]byte(text))
	if err != nil {
		t.Fatalf("Parse(%s): %v", text, err)
	}
	return v
}

// TestStaffOnly: original §1.12 item 62.
func TestStaffOnly(t *testing.T) {
	s := newStaffServer(t)
	code, h, body := s.do(t, "GET", "/capacity/config/", "", "")
	if code != 401 || h.Get("WWW-Authenticate") == "" {
		t.Errorf("anonymous GET = %d, WWW-Authenticate %q; want 401 with a challenge", code, h.Get("WWW-Authenticate"))
	}
	wantBody(t, "401 body", body, `{"detail":"Authentication credentials were not provided."}`)
	for _, path := range []string{"/capacity/config/", "/capacity/config/history/", "/capacity/status/"} {
		code, _, body := s.do(t, "GET", path, "user-token", "")
		if code != 403 {
			t.Errorf("non-staff GET %s = %d; want 403", path, code)
		}
		wantBody(t, "403 body", body, `{"detail":"You do not have permission to perform this action."}`)
	}
	if code, _, _ := s.do(t, "PATCH", "/capacity/config/", "user-token", `{"es2_knn":1}`); code != 403 {
		t.Errorf("non-staff PATCH = %d; want 403", code)
	}
	if code, _, _ := s.do(t, "PATCH", "/capacity/config/", "", `{"es2_knn":1}`); code != 401 {
		t.Errorf("anonymous PATCH = %d; want 401", code)
	}
	if code, _, _ := s.do(t, "GET", "/capacity/config/", "broken", ""); code != 503 {
		t.Errorf("GET with a failing identity lookup = %d; want 503", code)
	}
	if n := s.rows(t); n != 0 {
		t.Errorf("%d rows; want 0", n)
	}
}

// TestGetConfigWithNoRow: original §1.12 item 63.
func TestGetConfigWithNoRow(t *testing.T) {
	s := newStaffServer(t)
	defaults := marshal(t, settings.Default(nil, settings.ModeShadow))
	for _, path := range []string{"/capacity/config/", "/capacity/config"} {
		code, _, body := s.do(t, "GET", path, "staff-token", "")
		if code != 200 {
			t.Fatalf("GET %s = %d; want 200", path, code)
		}
		wantBody(t, "GET "+path, body, `{"version":null,"created_by":null,"created_at":null,"source":null,"note":null,"config":`+defaults+`,"defaults":`+defaults+`}`)
	}
}

// TestChangeConfigAndReadItsHistory: original §1.12 item 64.
func TestChangeConfigAndReadItsHistory(t *testing.T) {
	s := newStaffServer(t)
	code, _, body := s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"tiers":{"preview":1},"note":"busy"}`)
	if code != 200 {
		t.Fatalf("PATCH = %d %v; want 200", code, body)
	}
	patch := body.(map[string]any)
	wantBody(t, "PATCH changes", patch["changes"], `{"tiers.preview":[2,1]}`)
	if patch["created_by"] != "root" || patch["note"] != "busy" || patch["source"] != "api" || patch["version"] == nil || patch["created_at"] == nil {
		t.Errorf("PATCH body = %v; want created_by root, note busy, source api, a version and a time", patch)
	}
	if got, _ := s.configs.Config(context.Background()).Number("tiers.preview"); got != 1 {
		t.Errorf("tiers.preview in force = %d; want 1 at once", got)
	}
	_, _, body = s.do(t, "GET", "/capacity/config/", "staff-token", "")
	if got := body.(map[string]any); marshal(t, got["version"]) != marshal(t, patch["version"]) ||
		marshal(t, got["config"]) != marshal(t, patch["config"]) {
		t.Errorf("GET after PATCH = %v; want the PATCH's version and config", got)
	}

	code, _, body = s.do(t, "PUT", "/capacity/config", "staff-token", `{"mode":"off"}`)
	if code != 200 {
		t.Fatalf("PUT = %d %v; want 200", code, body)
	}
	put := body.(map[string]any)
	wantBody(t, "PUT changes", put["changes"], `{"mode":["shadow","off"],"tiers.preview":[1,2]}`)
	if put["note"] != nil {
		t.Errorf("PUT note = %v; want null", put["note"])
	}

	code, _, body = s.do(t, "GET", "/capacity/config/history/?limit=1", "staff-token", "")
	if list, ok := body.([]any); code != 200 || !ok || len(list) != 1 {
		t.Fatalf("history?limit=1 = %d %v; want one entry", code, body)
	} else {
		wantBody(t, "history[0].changes", list[0].(map[string]any)["changes"], `{"mode":["shadow","off"],"tiers.preview":[1,2]}`)
	}
	_, _, body = s.do(t, "GET", "/capacity/config/history", "staff-token", "")
	list := body.([]any)
	if len(list) != 2 {
		t.Fatalf("history = %v; want 2 entries", list)
	}
	entry := list[1].(map[string]any)
	wantBody(t, "history[1].changes", entry["changes"], `{"tiers.preview":[2,1]}`)
	keys := make([]string, 0, len(entry))
	for k := range entry {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"changes", "created_at", "created_by", "note", "source", "version"}; !slices.Equal(keys, want) {
		t.Errorf("history entry keys = %v; want %v", keys, want)
	}

	// A change that changes nothing: 200, the current row, changes {}.
	code, _, body = s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"mode":"off"}`)
	if got := body.(map[string]any); code != 200 || marshal(t, got["changes"]) != "{}" ||
		marshal(t, got["version"]) != marshal(t, put["version"]) {
		t.Errorf("PATCH changing nothing = %d %v; want 200, the PUT's version and {}", code, got)
	}
	if n := s.rows(t); n != 2 {
		t.Errorf("%d rows; want 2", n)
	}
}

// TestChangeConfigRejectsBadInput: original §1.12 item 65, and bodies that
// are not JSON or too large. None adds a row.
func TestChangeConfigRejectsBadInput(t *testing.T) {
	s := newStaffServer(t)
	big := `{"note":"` + strings.Repeat("x", 2<<20) + `"}`
	for _, tc := range []struct {
		method, body string
		code         int
		detail       string
	}{
		{"PATCH", `{"es2_knn":-1}`, 400, `["\"es2_knn\" must be a whole number from 0 to 100000."]`},
		{"PATCH", `{"bogus":1}`, 400, `["Unknown setting \"bogus\"."]`},
		{"PATCH", `{"tiers":5}`, 400, `["tiers must be an object."]`},
		{"PUT", `{"es2_knn":"3"}`, 400, `["\"es2_knn\" must be a whole number from 0 to 100000."]`},
		{"PATCH", `{"note":5}`, 400, `"\"note\" must be a string."`},
		{"PATCH", `[1]`, 400, `"Send a JSON object."`},
		{"PUT", `"x"`, 400, `"Send a JSON object."`},
		{"PATCH", `{"es2_knn":`, 400, `"Send a JSON object."`},
		{"PATCH", `{} {}`, 400, `"Send a JSON object."`},
		{"PATCH", ``, 400, `"Send a JSON object."`},
		{"PATCH", big, 413, `"Send at most 1 MiB."`},
	} {
		code, _, body := s.do(t, tc.method, "/capacity/config/", "staff-token", tc.body)
		if code != tc.code {
			t.Errorf("%s %.40s = %d; want %d", tc.method, tc.body, code, tc.code)
		}
		obj, _ := body.(map[string]any)
		if g, w := marshal(t, obj["detail"]), marshal(t, mustDoc(t, tc.detail)); !strings.Contains(g, strings.Trim(w, "[]")) {
			t.Errorf("%s %.40s detail = %s; want %s", tc.method, tc.body, g, w)
		}
	}
	if n := s.rows(t); n != 0 {
		t.Errorf("%d rows after bad input; want 0", n)
	}
}

func TestHistoryLimit(t *testing.T) {
	s := newStaffServer(t)
	for i := range 3 {
		if _, err := s.configs.Save(context.Background(), config.Edit{Set: settings.Patch{"es2_knn": json.Number(string(rune('4' + i)))}, Source: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]int{"": 3, "?limit=2": 2, "?limit=0": 3, "?limit=x": 3, "?limit=-5": 1, "?limit=100000": 3} {
		code, _, body := s.do(t, "GET", "/capacity/config/history/"+q, "staff-token", "")
		if list, _ := body.([]any); code != 200 || len(list) != want {
			t.Errorf("history%s = %d, %d entries; want %d", q, code, len(list), want)
		}
	}
}

// TestStatus: original §1.12 item 66, with a real gate on the memory
// lane store and one call in flight.
func TestStatus(t *testing.T) {
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "capgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	configs := newConfigService(store)
	gate, err := capgate.NewGate(memory.New(nil), configs, nil, "task1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := capgatehttp.OCLCall("match", 2, true, false)
	call.UserID, call.Tier = "alice", "preview"
	a := gate.Admit(ctx, call)
	if a == nil || a.Outcome().Decision != capgate.DecisionAdmitted {
		t.Fatalf("Admit = %v; want admitted", a)
	}
	defer a.Release(ctx)
	h := capgatehttp.NewStaffHandler(configs, tokens{"staff-token": {UserID: "root", Staff: true}})
	h.Status = gate.Status
	srv := httptest.NewServer(h)
	defer srv.Close()
	s := &staffServer{Server: srv, store: store, configs: configs}

	code, _, body := s.do(t, "GET", "/capacity/status", "staff-token", "")
	got, _ := body.(map[string]any)
	if code != 200 || got["mode"] != "shadow" || got["enforce_for"] != "aware" || got["lanes_health"] != "ok" ||
		got["lanes"] != "memory" || got["redis"] != status.NoRedis {
		t.Errorf("status = %d %v; want 200, shadow, aware, lanes memory and ok, redis %q (there is none)", code, body, status.NoRedis)
	}
	wantBody(t, "status api_heavy", got["api_heavy"], `{"in_flight":1,"limit":4,"bulk_limit":3}`)
	wantBody(t, "status users", got["users"], `{"alice":{"in_flight":1}}`)
	wantBody(t, "status tasks", got["tasks"], `{"task1":{"in_flight":1,"limit":4}}`)

	s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"api_heavy":{"cluster":6}}`)
	_, _, body = s.do(t, "GET", "/capacity/status/", "staff-token", "")
	wantBody(t, "status api_heavy after a change", body.(map[string]any)["api_heavy"], `{"in_flight":1,"limit":6,"bulk_limit":5}`)
	if v, ok := body.(map[string]any)["idempotency"]; ok {
		t.Errorf("status idempotency %v in mode off; want it left out", v)
	}
	s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"idempotency":{"mode":"auto"}}`)
	_, _, body = s.do(t, "GET", "/capacity/status/", "staff-token", "")
	if v := body.(map[string]any)["idempotency"]; v != "auto" {
		t.Errorf("status idempotency %v; want auto", v)
	}
}

func TestStatusWithoutALaneStore(t *testing.T) {
	s := newStaffServer(t)
	h := capgatehttp.NewStaffHandler(s.configs, tokens{"staff-token": {UserID: "root", Staff: true}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, _, _ := (&staffServer{Server: srv, store: s.store, configs: s.configs}).do(t, "GET", "/capacity/status/", "staff-token", ""); code != 503 {
		t.Errorf("status with no lane store = %d; want 503", code)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	s := newStaffServer(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/capacity/config/", "GET, PATCH, PUT"},
		{"POST", "/capacity/config", "GET, PATCH, PUT"},
		{"PATCH", "/capacity/config/history/", "GET"},
		{"PUT", "/capacity/status/", "GET"},
	} {
		code, h, _ := s.do(t, tc.method, tc.path, "staff-token", "{}")
		if code != 405 || h.Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d, Allow %q; want 405, %q", tc.method, tc.path, code, h.Get("Allow"), tc.allow)
		}
	}
	if code, _, _ := s.do(t, "GET", "/capacity/nothing/", "staff-token", ""); code != 404 {
		t.Errorf("GET /capacity/nothing/ = %d; want 404", code)
	}
	if n := s.rows(t); n != 0 {
		t.Errorf("%d rows; want 0", n)
	}
}

// The stores' checks, which the public probes leave out, are for staff at
// /capacity/health/.
func TestStaffHealth(t *testing.T) {
	s := newStaffServer(t)
	h := capgatehttp.NewStaffHandler(s.configs, tokens{"staff-token": {UserID: "root", Staff: true},
		"user-token": {UserID: "alice"}})
	h.Health = &capgatehttp.Health{Checks: []capgatehttp.HealthCheck{{Name: "lanes",
		Check: func(context.Context) error { return errors.New("i/o timeout") }}}}
	h.Health.CheckNow(t.Context())
	srv := httptest.NewServer(h)
	defer srv.Close()
	ss := &staffServer{Server: srv, store: s.store, configs: s.configs}
	code, _, body := ss.do(t, "GET", "/capacity/health/", "staff-token", "")
	if code != 200 {
		t.Fatalf("staff: %d", code)
	}
	wantBody(t, "staff health", body, `{"status":"ok","ready":true,"checks":{"lanes":"i/o timeout"}}`)
	if code, _, _ := ss.do(t, "GET", "/capacity/health/", "user-token", ""); code != 403 {
		t.Errorf("non-staff: %d, want 403", code)
	}
	if code, _, _ := ss.do(t, "GET", "/capacity/health/", "", ""); code != 401 {
		t.Errorf("anonymous: %d, want 401", code)
	}
}

// The idempotency key is part of the config document: changed, validated,
// in the history and rolled back like any other setting.
func TestIdempotencyConfigHistoryAndRollback(t *testing.T) {
	s := newStaffServer(t)
	code, _, body := s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"idempotency":{"mode":"key","ttl_seconds":60}}`)
	if code != 200 {
		t.Fatalf("PATCH = %d %v", code, body)
	}
	first := body.(map[string]any)
	wantBody(t, "changes", first["changes"], `{"idempotency.mode":["off","key"],"idempotency.ttl_seconds":[300,60]}`)
	if got := s.configs.Config(context.Background()).Idempotency.Mode; got != settings.IdempotencyKey {
		t.Fatalf("mode in force %q", got)
	}
	code, _, body = s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"idempotency":{"mode":"sometimes"}}`)
	wantBody(t, "bad PATCH", body, `{"detail":["\"idempotency.mode\" must be one of off, key, auto."]}`)
	if code != 400 {
		t.Fatalf("bad PATCH = %d", code)
	}
	s.do(t, "PATCH", "/capacity/config/", "staff-token", `{"idempotency":{"mode":"auto"}}`)
	_, _, body = s.do(t, "GET", "/capacity/config/history/", "staff-token", "")
	if list := body.([]any); len(list) != 2 {
		t.Fatalf("history %v; want 2 entries", list)
	} else {
		wantBody(t, "history[0].changes", list[0].(map[string]any)["changes"], `{"idempotency.mode":["key","auto"]}`)
	}
	code, _, body = s.do(t, "POST", "/capacity/config/rollback/", "staff-token",
		`{"version":`+marshal(t, first["version"])+`}`)
	if code != 200 {
		t.Fatalf("rollback = %d %v", code, body)
	}
	wantBody(t, "rollback changes", body.(map[string]any)["changes"], `{"idempotency.mode":["auto","key"]}`)
	if got := s.configs.Config(context.Background()).Idempotency; got.Mode != settings.IdempotencyKey || got.TTLSeconds != 60 {
		t.Fatalf("after rollback %+v", got)
	}
}

// GET /capacity/policy/ gives the status page the policy in force: its
// tiers, routes, lanes (scope, key, status key, config keys of the limit
// and the reserve) and every lane number's config key, in the config's
// order. Staff only, like the rest.
func TestGetPolicy(t *testing.T) {
	s := newStaffServer(t)
	for _, tc := range []struct {
		token string
		code  int
	}{{"", 401}, {"user-token", 403}, {"broken", 503}} {
		if code, _, _ := s.do(t, "GET", "/capacity/policy/", tc.token, ""); code != tc.code {
			t.Errorf("GET /capacity/policy/ as %q = %d; want %d", tc.token, code, tc.code)
		}
	}
	if code, h, _ := s.do(t, "POST", "/capacity/policy", "staff-token", "{}"); code != 405 || h.Get("Allow") != "GET" {
		t.Errorf("POST /capacity/policy = %d Allow %q; want 405 GET", code, h.Get("Allow"))
	}

	code, _, body := s.do(t, "GET", "/capacity/policy/", "staff-token", "")
	if code != 200 {
		t.Fatalf("GET /capacity/policy/ = %d %v", code, body)
	}
	wantBody(t, "the OCL policy", body, `{"name":"ocl","file":"policy/ocl.yaml",
		"tiers":["staff","core","early_access","preview"],
		"routes":[{"name":"match","log_name":"$match","method":"POST","path":"/concepts/$match"},
			{"name":"rerank","log_name":"$rerank","method":"POST","path":"/concepts/$rerank"}],
		"lanes":[
			{"name":"api_heavy","scope":"cluster","status":"api_heavy","routes":["match","rerank"],"limit_keys":["api_heavy.cluster"],"reserve_key":"reserve_single_row"},
			{"name":"api_heavy_task","scope":"task","status":"tasks","routes":["match","rerank"],"limit_keys":["api_heavy.per_task"]},
			{"name":"es2_knn","scope":"cluster","status":"es2_knn","routes":["match"],"limit_keys":["es2_knn"]},
			{"name":"tier","scope":"key","key":"tier","status":"tiers","routes":["match","rerank"],
				"limit_keys":["tiers.staff","tiers.core","tiers.early_access","tiers.preview"],"per_tier":true},
			{"name":"user","scope":"key","key":"user","status":"users","routes":["match","rerank"],
				"limit_keys":["per_user.staff","per_user.core","per_user.early_access","per_user.preview"],"per_tier":true}],
		"config_keys":["api_heavy.cluster","api_heavy.per_task","es2_knn","reserve_single_row",
			"tiers.staff","tiers.core","tiers.early_access","tiers.preview",
			"per_user.staff","per_user.core","per_user.early_access","per_user.preview"],
		"log_event":"ocl_capacity","header_prefix":"X-OCL-Capacity-"}`)

	// Each status key the page reads is in the status JSON, and each
	// config key the form sends is a number of the config.
	_, _, st := s.do(t, "GET", "/capacity/status/", "staff-token", "")
	_, _, cfg := s.do(t, "GET", "/capacity/config/", "staff-token", "")
	checkPageKeys(t, body, st, cfg)

	// Another policy: the view follows it.
	s.configs.SetPolicy(inferencePolicy(t))
	_, _, body = s.do(t, "GET", "/capacity/policy/", "staff-token", "")
	wantBody(t, "the inference policy", body, `{"name":"inference","file":"../examples/inference/policy.yaml",
		"tiers":["pro","free"],
		"routes":[{"name":"chat","log_name":"chat","method":"POST","path":"/v1/chat/completions"},
			{"name":"completions","log_name":"completions","method":"POST","path":"/v1/completions"},
			{"name":"embeddings","log_name":"embeddings","method":"POST","path":"/v1/embeddings"}],
		"lanes":[
			{"name":"cluster","scope":"cluster","status":"cluster","routes":["chat","completions","embeddings"],"limit_keys":["lanes.cluster"]},
			{"name":"model","scope":"key","key":"model","status":"model","routes":["chat","completions","embeddings"],"limit_keys":["lanes.model"]},
			{"name":"user","scope":"key","key":"user","status":"user","routes":["chat","completions","embeddings"],
				"limit_keys":["lanes.user.pro","lanes.user.free"],"per_tier":true}],
		"config_keys":["lanes.cluster","lanes.model","lanes.user.pro","lanes.user.free"],
		"log_event":"capgate_call","header_prefix":"Capgate-"}`)
	_, _, st = s.do(t, "GET", "/capacity/status/", "staff-token", "")
	_, _, cfg = s.do(t, "GET", "/capacity/config/", "staff-token", "")
	checkPageKeys(t, body, st, cfg)
}

// checkPageKeys checks that what the page reads by the policy view is
// there: each lane under its status key in the status, and each config
// key a number in the config.
func checkPageKeys(t *testing.T, view, st, cfg any) {
	t.Helper()
	v, s := view.(map[string]any), st.(map[string]any)
	for _, l := range v["lanes"].([]any) {
		l := l.(map[string]any)
		if _, ok := s[l["status"].(string)].(map[string]any); !ok {
			t.Errorf("policy %s: lane %s: no object %q in the status %v", v["name"], l["name"], l["status"], s)
		}
	}
	c := cfg.(map[string]any)["config"]
	for _, k := range v["config_keys"].([]any) {
		var at any = c
		for part := range strings.SplitSeq(k.(string), ".") {
			m, _ := at.(map[string]any)
			at = m[part]
		}
		if _, ok := at.(json.Number); !ok {
			if _, ok := at.(float64); !ok {
				t.Errorf("policy %s: config key %s is %v in the config; want a number", v["name"], k, at)
			}
		}
	}
}

// A 401 asks for the policy's credential scheme: Token for the built-in
// policy, Bearer for one whose callers send bearer tokens, so the status
// page signs in with what the identity reads.
func TestStaffChallengeIsThePolicysScheme(t *testing.T) {
	for _, tc := range []struct {
		p    *policy.Policy
		want string
	}{{policy.OCL(), "Token"}, {inferencePolicy(t), "Bearer"}} {
		store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "capgate.db"))
		if err != nil {
			t.Fatal(err)
		}
		configs := newConfigService(store)
		configs.SetPolicy(tc.p)
		srv := httptest.NewServer(capgatehttp.NewStaffHandler(configs, tokens{}))
		resp, err := http.Get(srv.URL + "/capacity/config/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || got != tc.want {
			t.Errorf("policy %s: %d, WWW-Authenticate %q; want 401, %q", tc.p.Name, resp.StatusCode, got, tc.want)
		}
		srv.Close()
		store.Close()
	}
}
