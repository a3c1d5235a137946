package loadgen_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/configtest"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

// stack is the simulated API behind a real gateway on the memory store.
type stack struct {
	api   *simapi.API
	gw    *httptest.Server
	cfg   *settings.Fixed
	lines *mock.Sink
	users []loadgen.User
}

func newStack(t *testing.T, cfg settings.Config) *stack {
	t.Helper()
	var users []simapi.User
	var lusers []loadgen.User
	for _, u := range []struct {
		name, group string
		tier        string
	}{
		{"core-1", "core_user", "core"}, {"core-2", "core_user", "core"},
		{"early-1", "early_access", "early_access"}, {"early-2", "early_access", "early_access"},
		{"preview-1", "", "preview"}, {"preview-2", "", "preview"},
	} {
		su := simapi.User{Token: u.name + "-token", Username: u.name}
		if u.group != "" {
			su.Groups = []string{u.group}
		}
		users = append(users, su)
		lusers = append(lusers, loadgen.User{Name: u.name, Token: su.Token, Tier: string(u.tier)})
	}
	api := simapi.New(users)
	// Calls last a good part of a second, as heavy calls do: against the
	// 1 s floor of a refusal's wait, much shorter calls would make the run
	// mostly waiting and the fairness figure mostly noise.
	api.Latency = func(_ string, rows int, _ bool) time.Duration {
		return 200*time.Millisecond + time.Duration(rows)*5*time.Millisecond
	}
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	fc := settings.NewFixed(cfg)
	lines := &mock.Sink{}
	gate, err := capgate.NewGate(memory.New(nil), fc, lines, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.NewUpstream(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: u, Gate: gate, Identify: ids})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return &stack{api: api, gw: srv, cfg: fc, lines: lines, users: lusers}
}

func tight(t testing.TB, mode settings.Mode) settings.Config {
	c := settings.Default(nil, mode)
	c.EnforceFor = settings.EnforceAware
	configtest.SetNumbers(t, &c, "api_heavy.cluster", 4, "api_heavy.per_task", 4, "reserve_single_row", 1, "es2_knn", 3,
		"tiers.staff", 4, "tiers.core", 2, "tiers.early_access", 2, "tiers.preview", 1,
		"per_user.staff", 4, "per_user.core", 2, "per_user.early_access", 1, "per_user.preview", 1)
	c.RetryAfter = settings.RetryAfter{Base: 1, Max: 2, Paused: 5}
	c.Wait.MaxSeconds = 0 // these tests drive the client's handling of refusals
	return c
}

func TestEnforceUnderLoadFailsNoRowAndStaysFair(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for several seconds")
	}
	s := newStack(t, tight(t, settings.ModeEnforce))
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: s.gw.URL, Users: s.users, Duration: 10 * time.Second, Workers: 3, Grace: 15 * time.Second,
		// Equal work for every user (bulk calls of 20 rows): the index then
		// measures the scheduling, not the luck of the job mix.
		Mix: loadgen.Mix{Bulk: 1}, BulkRows: [2]int{20, 20},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rep.Users {
		if u.RowsFailed != 0 || u.RowsCancelled != 0 || u.RowsDone == 0 {
			t.Errorf("%s: done %d failed %d cancelled %d (errors %v)", u.User, u.RowsDone, u.RowsFailed, u.RowsCancelled, u.Errors)
		}
	}
	refused := 0
	for _, n := range rep.Capacity429 {
		refused += int(n)
	}
	if refused == 0 {
		t.Fatal("no call was refused: the limits were not tight enough to test anything")
	}
	for _, tr := range rep.Tiers {
		if tr.Fairness < 0.9 {
			t.Errorf("tier %s: fairness %.3f < 0.9", tr.Tier, tr.Fairness)
		}
	}
	// The API never saw more than the limits allow: the bulk limit (3),
	// the cluster with the single-row reserve (4), es2_knn (3), per user.
	st := s.api.Stats()
	if st.Peak > 4 || st.PeakBulk > 3 || st.PeakSemantic > 3 {
		t.Errorf("API peaks: all %d (limit 4), bulk %d (3), semantic %d (3)", st.Peak, st.PeakBulk, st.PeakSemantic)
	}
	for user, peak := range st.PeakPerUser {
		if limit := map[byte]int{'c': 2, 'e': 1, 'p': 1}[user[0]]; peak > limit {
			t.Errorf("user %s: %d calls at once, limit %d", user, peak, limit)
		}
	}
	t.Logf("API calls %d, capacity 429s %v, API peak %d, tiers %+v", st.Calls, rep.Capacity429, st.Peak, rep.Tiers)
}

func TestShadowThrottlesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for several seconds")
	}
	s := newStack(t, tight(t, settings.ModeShadow))
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: s.gw.URL, Users: s.users, Duration: 3 * time.Second, Workers: 3,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Throttled() != 0 || rep.Failed() != 0 || len(rep.Capacity429) != 0 {
		t.Fatalf("shadow: throttled %d failed %d 429s %v", rep.Throttled(), rep.Failed(), rep.Capacity429)
	}
	shadowRefused := 0
	for _, l := range s.lines.All(t) {
		if l["decision"] == "shadow-refused" {
			shadowRefused++
		}
	}
	if shadowRefused == 0 {
		t.Fatal("no call was shadow-refused: the load did not reach the limits")
	}
}

// A user whose calls are throttled (a paused lane outlasting the run)
// waits the pause out: its workers don't spin on calls that end at once.
func TestThrottledUserDoesNotSpin(t *testing.T) {
	c := tight(t, settings.ModeEnforce)
	c.EnforceFor = settings.EnforceAll
	configtest.SetNumbers(t, &c, "per_user.preview", 0)
	c.RetryAfter.Paused = 120
	s := newStack(t, c)
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: s.gw.URL, Users: s.users, Duration: 2 * time.Second, Workers: 2, Grace: 2 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range rep.Users {
		if u.Tier != "preview" {
			continue
		}
		if u.Calls == 0 || u.Calls > 4 || u.RowsThrottled == 0 || u.RowsDone != 0 {
			t.Errorf("%s: %d calls, %d rows throttled, %d done; want at most 4 throttled calls", u.User, u.Calls, u.RowsThrottled, u.RowsDone)
		}
	}
}

// TestReportColumnsOfATimedRun: a timed run has no finish times, so its
// users table shows no finish, round-robin or slowdown columns.
func TestReportColumnsOfATimedRun(t *testing.T) {
	var timed, fixed strings.Builder
	(&loadgen.Report{Users: []loadgen.UserReport{{User: "a", Tier: "core"}}}).Write(&timed)
	(&loadgen.Report{Users: []loadgen.UserReport{{User: "a", Tier: "core", Finish: time.Second}}}).Write(&fixed)
	if strings.Contains(timed.String(), "round-robin") {
		t.Errorf("a timed run's report has the fixed workload's columns:\n%s", timed.String())
	}
	if !strings.Contains(fixed.String(), "round-robin") {
		t.Errorf("a fixed workload's report lacks its round-robin column:\n%s", fixed.String())
	}
}
