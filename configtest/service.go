package configtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/settings"
)

func mustSave(t *testing.T, s *config.Service, change string, replace bool, by, source, note string) config.SaveResult {
	t.Helper()
	res, err := s.Save(context.Background(), config.Edit{Set: Doc(t, change), Replace: replace, By: by, Source: source, Note: note})
	if err != nil {
		t.Fatalf("Save(%s): %v", change, err)
	}
	return res
}

func wantJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	if g := JSON(t, got); g != want {
		t.Errorf("%s = %s; want %s", what, g, want)
	}
}

// testDefaults: original §1.1 items 1 and 2.
func testDefaults(t *testing.T, open Opener) {
	store := open(t)
	s, _, _, _ := Service(store)
	got := s.Config(context.Background())
	want := settings.Default(nil, settings.ModeShadow)
	if !Same(got, want) {
		t.Errorf("Config with nothing stored = %+v; want the defaults %+v", got, want)
	}
	for boot, mode := range map[settings.Mode]settings.Mode{"off": "off", "enforce": "enforce", "loud": "shadow", "": "shadow"} {
		s := config.NewService(store, boot)
		s.ReadTimeout = 10 * time.Second
		if got := s.Config(context.Background()).Mode; got != mode {
			t.Errorf("boot mode %q: mode = %q; want %q", boot, got, mode)
		}
	}
}

// testSaveAddsAVersion: original §1.1 item 6.
func testSaveAddsAVersion(t *testing.T, open Opener) {
	store := open(t)
	s, _, lines, _ := Service(store)
	ctx := context.Background()
	defaults := settings.Default(nil, settings.ModeShadow)

	res := mustSave(t, s, `{"tiers":{"preview":1},"mode":"off"}`, false, "alice", config.SourceAPI, "quiet")
	wantJSON(t, "changes", res.Diff, `{"mode":["shadow","off"],"tiers.preview":[2,1]}`)
	first := res.Version
	latest, err := store.Latest(ctx)
	if err != nil || latest == nil || latest.ID != first.ID {
		t.Fatalf("Latest = %+v, %v; want the saved version %+v", latest, err, first)
	}
	want := defaults
	want.Mode = settings.ModeOff
	SetNumbers(t, &want, "tiers.preview", 1)
	wantJSON(t, "stored config", latest.Config, JSON(t, want.Doc()))
	wantJSON(t, "stored previous_config", latest.PreviousConfig, JSON(t, defaults.Doc()))
	if latest.CreatedBy != "alice" || latest.Source != "api" || latest.Note != "quiet" {
		t.Errorf("row = by %q, source %q, note %q; want alice, api, quiet", latest.CreatedBy, latest.Source, latest.Note)
	}
	if got := s.Config(ctx); !Same(got, want) {
		t.Errorf("Config after the save = %+v; want %+v at once", got, want)
	}
	wantLines := []string{fmt.Sprintf(`{"event":"ocl_capacity_config","version":%d,"changed_by":"alice","source":"api","note":"quiet","changes":{"mode":["shadow","off"],"tiers.preview":[2,1]},"mode":"off"}`, first.ID)}
	if got := lines.Raw(); !slices.Equal(got, wantLines) {
		t.Errorf("log lines = %q; want %q", got, wantLines)
	}

	res = mustSave(t, s, `{"es2_knn":2}`, false, "", config.SourceCommand, "")
	wantJSON(t, "second changes", res.Diff, `{"es2_knn":[3,2]}`)
	if Number(t, res.Config, "tiers.preview") != 1 || res.Version.CreatedBy != "" || res.Version.Source != "command" {
		t.Errorf("second save = %+v; want tiers.preview kept at 1, no user, source command", res)
	}
	wantJSON(t, "second previous_config", res.Version.PreviousConfig, JSON(t, want.Doc()))
	second := res.Version
	if got := lines.Raw(); len(got) != 2 || !strings.Contains(got[1], `"source":"command","changes":{"es2_knn":[3,2]},"mode":"off"}`) ||
		strings.Contains(got[1], "changed_by") || strings.Contains(got[1], "note") {
		t.Errorf("second log line = %q; want no changed_by and no note", got[len(got)-1])
	}

	res = mustSave(t, s, `{"es2_knn":2}`, false, "bob", config.SourceAPI, "again")
	if res.Version == nil || res.Version.ID != second.ID || len(res.Diff) != 0 || res.Diff == nil {
		t.Errorf("identical save = version %+v, changes %v; want version %d and {}", res.Version, res.Diff, second.ID)
	}
	if Number(t, res.Config, "es2_knn") != 2 || Number(t, res.Config, "tiers.preview") != 1 {
		t.Errorf("identical save config = %+v", res.Config)
	}
	if n := Rows(t, store); n != 2 {
		t.Errorf("%d rows; want 2", n)
	}
	if n := len(lines.Raw()); n != 2 {
		t.Errorf("%d log lines; want 2 (none for a save that changed nothing)", n)
	}
}

// testSaveReplace: original §1.1 item 7.
func testSaveReplace(t *testing.T, open Opener) {
	s, _, _, _ := Service(open(t))
	mustSave(t, s, `{"tiers":{"preview":1},"es2_knn":1}`, false, "", "api", "")
	res := mustSave(t, s, `{"mode":"off"}`, true, "", "api", "")
	want := settings.Default(nil, settings.ModeShadow)
	want.Mode = settings.ModeOff
	if !Same(res.Config, want) {
		t.Errorf("replaced config = %+v; want the defaults with mode off", res.Config)
	}
	wantJSON(t, "changes", res.Diff, `{"es2_knn":[1,3],"mode":["shadow","off"],"tiers.preview":[1,2]}`)
}

// testFailedLogLine: original §1.1 item 8.
func testFailedLogLine(t *testing.T, open Opener) {
	store := open(t)
	s, _, lines, logs := Service(store)
	lines.Err = errors.New("broken pipe")
	res := mustSave(t, s, `{"es2_knn":1}`, false, "alice", "api", "")
	if Number(t, res.Config, "es2_knn") != 1 {
		t.Errorf("config = %+v; want es2_knn 1", res.Config)
	}
	latest, err := store.Latest(context.Background())
	if err != nil || latest == nil || latest.ID != res.Version.ID {
		t.Fatalf("Latest = %+v, %v; want the saved row", latest, err)
	}
	want := fmt.Sprintf("WARN Capacity config version %d was saved, but its log line failed: broken pipe", res.Version.ID)
	if !slices.Contains(logs.Records(), want) {
		t.Errorf("logs = %q; want %q", logs.Records(), want)
	}
}

// testSaveRejectsInvalid: original §1.1 item 9.
func testSaveRejectsInvalid(t *testing.T, open Opener) {
	store := open(t)
	s, _, lines, _ := Service(store)
	_, err := s.Save(context.Background(), config.Edit{Set: Doc(t, `{"es2_knn":-1}`), By: "alice", Source: "api"})
	verr, ok := errors.AsType[*settings.ValidationError](err)
	if !ok || !slices.Contains(verr.Messages, `"es2_knn" must be a whole number from 0 to 100000.`) {
		t.Fatalf("Save error = %v; want a *ValidationError about es2_knn", err)
	}
	if !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
	}
	if n, l := Rows(t, store), len(lines.Raw()); n != 0 || l != 0 {
		t.Errorf("%d rows, %d log lines; want none", n, l)
	}
}

// testBadInputAddsNoRow: wrong types, unknown keys and non-integers.
func testBadInputAddsNoRow(t *testing.T, open Opener) {
	store := open(t)
	s, _, _, _ := Service(store)
	for _, change := range []string{
		`{"bogus":1}`, `{"tiers":{"gold":1}}`, `{"tiers":5}`, `{"mode":"loud"}`, `{"es2_knn":"3"}`,
		`{"es2_knn":true}`, `{"es2_knn":3.0}`, `{"es2_knn":1e2}`, `{"per_user":{"preview":100001}}`,
		`{"reserve_single_row":5}`, `{"renew_seconds":21}`, `{"api_heavy":null}`,
	} {
		_, err := s.Save(context.Background(), config.Edit{Set: Doc(t, change), Source: "api"})
		if _, ok := errors.AsType[*settings.ValidationError](err); !ok {
			t.Errorf("Save(%s) error = %v; want a *ValidationError", change, err)
		}
		_, err = s.Save(context.Background(), config.Edit{Set: Doc(t, change), Replace: true, Source: "api"})
		if _, ok := errors.AsType[*settings.ValidationError](err); !ok {
			t.Errorf("Save(%s, replace) error = %v; want a *ValidationError", change, err)
		}
	}
	if n := Rows(t, store); n != 0 {
		t.Errorf("%d rows after bad input; want 0", n)
	}
}

// testConfigIsCached: original §1.1 item 10.
func testConfigIsCached(t *testing.T, open Opener) {
	store := open(t)
	s, clock, _, _ := Service(store)
	s.CacheTTL = 60 * time.Second
	ctx := context.Background()
	if got := Number(t, s.Config(ctx), "es2_knn"); got != 3 {
		t.Fatalf("es2_knn = %d; want 3", got)
	}
	changed := settings.Default(nil, settings.ModeShadow)
	SetNumbers(t, &changed, "es2_knn", 1)
	Append(t, store, changed.Doc())
	clock.Advance(59 * time.Second)
	if got := Number(t, s.Config(ctx), "es2_knn"); got != 3 {
		t.Errorf("es2_knn within the cache time = %d; want the cached 3", got)
	}
	clock.Advance(time.Second)
	if got := Number(t, s.Config(ctx), "es2_knn"); got != 1 {
		t.Errorf("es2_knn after the cache time = %d; want 1", got)
	}
	SetNumbers(t, &changed, "es2_knn", 2)
	Append(t, store, changed.Doc())
	s.Invalidate()
	if got := Number(t, s.Config(ctx), "es2_knn"); got != 2 {
		t.Errorf("es2_knn after Invalidate = %d; want 2", got)
	}
}

// testResolveStoredRows: original §1.1 item 5, through the service.
func testResolveStoredRows(t *testing.T, open Opener) {
	store := open(t)
	s, _, _, logs := Service(store)
	ctx := context.Background()
	Append(t, store, Doc(t, `{"retired_setting":1,"es2_knn":5}`))
	want := settings.Default(nil, settings.ModeShadow)
	SetNumbers(t, &want, "es2_knn", 5)
	if got := s.Config(ctx); !Same(got, want) {
		t.Errorf("Config = %+v; want the defaults with es2_knn 5 (retired keys ignored)", got)
	}
	v := Append(t, store, Doc(t, `{"es2_knn":-1}`))
	s.Invalidate()
	if got := s.Config(ctx); !Same(got, settings.Default(nil, settings.ModeShadow)) {
		t.Errorf("Config of an invalid row = %+v; want the defaults", got)
	}
	if want := fmt.Sprintf("ERROR Capacity config version %d is invalid; using the defaults", v.ID); !slices.Contains(logs.Records(), want) {
		t.Errorf("logs = %q; want %q", logs.Records(), want)
	}
	_, c, err := s.Current(ctx)
	if err != nil || !Same(c, settings.Default(nil, settings.ModeShadow)) {
		t.Errorf("Current = %+v, %v; want the defaults", c, err)
	}
}

// testWithoutWait: a row stored before "wait" existed, and a full PUT body
// from a client that doesn't know it, are valid and get the wait defaults.
func testWithoutWait(t *testing.T, open Opener) {
	store := open(t)
	s, _, _, _ := Service(store)
	ctx := context.Background()
	old := settings.Default(nil, settings.ModeShadow).Doc()
	delete(old, "wait")
	old["es2_knn"] = json.Number("5")
	Append(t, store, old)
	want := settings.Default(nil, settings.ModeShadow)
	SetNumbers(t, &want, "es2_knn", 5)
	if got := s.Config(ctx); !Same(got, want) {
		t.Errorf("Config of a row without wait = %+v; want the defaults with es2_knn 5", got)
	}
	put := settings.Default(nil, settings.ModeEnforce).Doc()
	delete(put, "wait")
	res, err := s.Save(ctx, config.Edit{Set: put, Replace: true, By: "staff", Source: "api"})
	if err != nil {
		t.Fatalf("PUT without wait: %v", err)
	}
	if res.Config.Wait != want.Wait {
		t.Errorf("wait after a PUT without it = %+v; want the defaults %+v", res.Config.Wait, want.Wait)
	}
}

// flaky wraps a store; its reads fail while fail is set.
type flaky struct {
	config.Store
	fail  atomic.Bool
	reads atomic.Int32
}

var errDown = errors.New("database is down")

func (f *flaky) Latest(ctx context.Context) (*config.Version, error) {
	f.reads.Add(1)
	if f.fail.Load() {
		return nil, errDown
	}
	return f.Store.Latest(ctx)
}

func (f *flaky) LatestWithin(ctx context.Context, d time.Duration) (*config.Version, error) {
	f.reads.Add(1)
	if f.fail.Load() {
		return nil, errDown
	}
	return f.Store.LatestWithin(ctx, d)
}

// testFailedReadKeepsLastKnown: original §1.1 item 11.
func testFailedReadKeepsLastKnown(t *testing.T, open Opener) {
	store := &flaky{Store: open(t)}
	s, clock, _, logs := Service(store)
	ctx := context.Background()
	store.fail.Store(true)
	if got := s.Config(ctx); !Same(got, settings.Default(nil, settings.ModeShadow)) {
		t.Errorf("Config with the database down and nothing cached = %+v; want the defaults", got)
	}
	if logs.Count("WARN") != 1 {
		t.Errorf("logs = %q; want one WARNING", logs.Records())
	}
	clock.Advance(time.Second)
	if got := s.Config(ctx); !Same(got, settings.Default(nil, settings.ModeShadow)) || store.reads.Load() != 1 {
		t.Errorf("the fallback is not cached for the cache time: %d reads", store.reads.Load())
	}

	store.fail.Store(false)
	mustSave(t, s, `{"es2_knn":1,"mode":"enforce"}`, false, "", "api", "")
	if got := s.Config(ctx); got.Mode != settings.ModeEnforce || Number(t, got, "es2_knn") != 1 {
		t.Fatalf("Config after the save = %+v; want enforce and es2_knn 1", got)
	}
	store.fail.Store(true)
	clock.Advance(config.DefaultCacheTTL)
	got := s.Config(ctx)
	if got.Mode != settings.ModeShadow || Number(t, got, "es2_knn") != 1 {
		t.Errorf("Config with the database down = mode %s, es2_knn %d; want shadow (enforce downgraded) and 1", got.Mode, Number(t, got, "es2_knn"))
	}
	if logs.Count("WARN") != 2 {
		t.Errorf("logs = %q; want a second WARNING", logs.Records())
	}
	store.fail.Store(false)
	clock.Advance(config.DefaultCacheTTL)
	if got := s.Config(ctx); got.Mode != settings.ModeEnforce {
		t.Errorf("Config once the database works = mode %s; want enforce again", got.Mode)
	}
}

// blocking wraps a store; while gate is set, LatestWithin reports on
// entered and waits for gate to close or its deadline.
type blocking struct {
	config.Store
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
	reads   atomic.Int32
}

func (b *blocking) block() (release func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gate, b.entered = make(chan struct{}), make(chan struct{}, 10)
	return sync.OnceFunc(func() { close(b.gate) })
}

func (b *blocking) LatestWithin(ctx context.Context, d time.Duration) (*config.Version, error) {
	b.reads.Add(1)
	b.mu.Lock()
	gate, entered := b.gate, b.entered
	b.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, fmt.Errorf("blocked read: %w", ctx.Err())
		}
	}
	return b.Store.LatestWithin(ctx, d)
}

// within fails the test unless fn returns within a generous bound; a
// refresh that made callers queue would hang here.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s did not return: it queued behind the refresh", what)
	}
}

func testRefreshIsSingleFlight(t *testing.T, open Opener) {
	store := &blocking{Store: open(t)}
	s, clock, _, _ := Service(store)
	s.ReadTimeout = time.Minute // only the release ends the blocked read
	ctx := context.Background()
	s.Config(ctx)
	changed := settings.Default(nil, settings.ModeShadow)
	SetNumbers(t, &changed, "es2_knn", 1)
	Append(t, store, changed.Doc())
	clock.Advance(config.DefaultCacheTTL)

	release := store.block()
	refreshed := make(chan settings.Config, 1)
	go func() { refreshed <- s.Config(ctx) }()
	<-store.entered
	for range 5 {
		within(t, "Config during a refresh", func() {
			if got := Number(t, s.Config(ctx), "es2_knn"); got != 3 {
				t.Errorf("Config during a refresh: es2_knn %d; want the last snapshot's 3", got)
			}
		})
	}
	release()
	if got := Number(t, <-refreshed, "es2_knn"); got != 1 {
		t.Errorf("the refreshing caller got es2_knn %d; want 1", got)
	}
	if got := Number(t, s.Config(ctx), "es2_knn"); got != 1 {
		t.Errorf("Config after the refresh: es2_knn %d; want 1", got)
	}
	if n := store.reads.Load(); n != 2 {
		t.Errorf("%d reads; want 2 (one refresh at a time)", n)
	}
}

func testFirstReadBounded(t *testing.T, open Opener) {
	store := &blocking{Store: open(t)}
	s, _, _, logs := Service(store)
	s.ReadTimeout = 50 * time.Millisecond
	s.BootMode = settings.ModeEnforce
	ctx := context.Background()
	defer store.block()()
	first := make(chan settings.Config, 1)
	go func() { first <- s.Config(ctx) }()
	<-store.entered
	var second settings.Config
	within(t, "the first Config", func() { second = s.Config(ctx) })
	want := settings.Default(nil, settings.ModeShadow) // enforce unconfirmed: shadow
	if !Same(second, want) {
		t.Errorf("a caller waiting for the first read got %+v; want the defaults in shadow", second)
	}
	if got := <-first; !Same(got, want) {
		t.Errorf("the first read gave %+v after timing out; want the defaults in shadow", got)
	}
	if logs.Count("WARN") != 1 {
		t.Errorf("logs = %q; want one WARNING", logs.Records())
	}
}

// testConcurrentPatches: 20 concurrent saves, each of a different
// setting, leave 20 rows and all 20 changes.
func testConcurrentPatches(t *testing.T, open Opener) {
	store := open(t)
	s, _, lines, _ := Service(store)
	changes := []string{
		`{"mode":"off"}`, `{"enforce_for":"all"}`, `{"api_heavy":{"cluster":10}}`, `{"api_heavy":{"per_task":5}}`,
		`{"es2_knn":7}`, `{"reserve_single_row":2}`, `{"tiers":{"staff":9}}`, `{"tiers":{"core":8}}`,
		`{"tiers":{"early_access":6}}`, `{"tiers":{"preview":5}}`, `{"per_user":{"staff":7}}`, `{"per_user":{"core":6}}`,
		`{"per_user":{"early_access":5}}`, `{"per_user":{"preview":4}}`, `{"lease_seconds":90}`, `{"renew_seconds":15}`,
		`{"max_hold_seconds":1000}`, `{"retry_after":{"base":6}}`, `{"retry_after":{"max":40}}`, `{"retry_after":{"paused":100}}`,
		`{"wait":{"max_seconds":5}}`, `{"wait":{"max_waiting":50}}`, `{"wait":{"max_waiting_per_user":3}}`,
		`{"unidentified":2}`,
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(changes))
	for i, c := range changes {
		change := Doc(t, c)
		wg.Go(func() {
			_, err := s.Save(context.Background(), config.Edit{Set: change, By: fmt.Sprintf("user%d", i), Source: "api"})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Save: %v", err)
		}
	}
	want := settings.Default(nil, settings.ModeOff)
	want.EnforceFor = settings.EnforceAll
	SetNumbers(t, &want, "api_heavy.cluster", 10, "api_heavy.per_task", 5, "es2_knn", 7, "reserve_single_row", 2,
		"tiers.staff", 9, "tiers.core", 8, "tiers.early_access", 6, "tiers.preview", 5,
		"per_user.staff", 7, "per_user.core", 6, "per_user.early_access", 5, "per_user.preview", 4)
	want.LeaseSeconds, want.RenewSeconds, want.MaxHoldSeconds = 90, 15, 1000
	want.RetryAfter = settings.RetryAfter{Policy: settings.PolicyAdaptive, Base: 6, Max: 40, Paused: 100}
	want.Wait = settings.Wait{MaxSeconds: 5, MaxWaiting: 50, MaxWaitingPerUser: 3}
	want.Unidentified = 2
	// Idempotency is not patched: the defaults.
	_, got, err := s.Current(context.Background())
	if err != nil || !Same(got, want) {
		t.Errorf("final config = %+v, %v;\nwant %+v", got, err, want)
	}
	vs, err := store.History(context.Background(), 100)
	if err != nil || len(vs) != len(changes) {
		t.Fatalf("History = %d rows, %v; want %d", len(vs), err, len(changes))
	}
	for _, v := range vs {
		if n := len(v.Diff()); n != 1 {
			t.Errorf("version %d changes %v; want exactly one setting", v.ID, v.Diff())
		}
	}
	if n := len(lines.Raw()); n != len(changes) {
		t.Errorf("%d log lines; want %d", n, len(changes))
	}
}
