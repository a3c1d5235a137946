// Package configtest is the conformance suite of config.Store: every
// config store runs it, and it drives the store through the real
// config.Service too (as the original implementation behaved).
package configtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/settings"
)

// Opener opens an empty store for one test and closes it (and removes what
// it made) in tb.Cleanup.
type Opener func(tb testing.TB) config.Store

// Run runs the suite, one subtest per behaviour, each on a store of its own.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"Empty", testEmpty},
		{"AppendAndRead", testAppendAndRead},
		{"UpdateWithoutChange", testUpdateWithoutChange},
		{"UpdateError", testUpdateError},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"Defaults", testDefaults},
		{"SaveAddsAVersion", testSaveAddsAVersion},
		{"SaveReplaceStartsFromDefaults", testSaveReplace},
		{"FailedLogLineKeepsTheChange", testFailedLogLine},
		{"SaveRejectsInvalidChange", testSaveRejectsInvalid},
		{"BadInputAddsNoRow", testBadInputAddsNoRow},
		{"ConfigIsCached", testConfigIsCached},
		{"ResolveStoredRows", testResolveStoredRows},
		{"RowsAndPutsWithoutWait", testWithoutWait},
		{"FailedReadKeepsLastKnown", testFailedReadKeepsLastKnown},
		{"RefreshIsSingleFlight", testRefreshIsSingleFlight},
		{"FirstReadWaitsAtMostTheTimeout", testFirstReadBounded},
		{"ConcurrentPatches", testConcurrentPatches},
		{"Adaptive", testAdaptive},
		{"RollbackLast", testRollbackLast},
		{"RollbackFirst", testRollbackFirst},
		{"RollbackRace", testRollbackRace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open) })
	}
}

// Logs is a slog.Handler that keeps "LEVEL message" records.
type Logs struct {
	mu      sync.Mutex
	records []string
}

// Enabled is always true.
func (h *Logs) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps the record's level and message.
func (h *Logs) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Level.String()+" "+r.Message)
	return nil
}

// WithAttrs returns h.
func (h *Logs) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h.
func (h *Logs) WithGroup(string) slog.Handler { return h }

// Records returns the records kept so far.
func (h *Logs) Records() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.records...)
}

// Count returns how many records start with prefix ("WARN", "ERROR ...").
func (h *Logs) Count(prefix string) int {
	n := 0
	for _, r := range h.Records() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// Service returns a config.Service over store with a fake clock, a
// recording sink and a recording logger. Its ReadTimeout is a generous
// 10 s, so a loaded machine doesn't turn reads into fallbacks; tests of
// the timeout set their own.
func Service(store config.Store) (*config.Service, *mock.Clock, *mock.Sink, *Logs) {
	clock, lines, logs := mock.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), &mock.Sink{}, &Logs{}
	s := config.NewService(store, settings.ModeShadow)
	s.Now, s.Sink, s.Logger = clock.Now, lines, slog.New(logs)
	s.ReadTimeout = 10 * time.Second
	return s, clock, lines, logs
}

// Doc parses a JSON object the way the stores do.
func Doc(tb testing.TB, text string) map[string]any {
	tb.Helper()
	v, err := jsontree.Parse([]byte(text))
	if err != nil {
		tb.Fatalf("Parse(%s): %v", text, err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		tb.Fatalf("Parse(%s): not an object", text)
	}
	return m
}

// JSON returns v as compact JSON (object keys sorted), for comparisons.
func JSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

// Rows returns how many versions the store holds (up to 1000).
func Rows(tb testing.TB, store config.Store) int {
	tb.Helper()
	vs, err := store.History(context.Background(), 1000)
	if err != nil {
		tb.Fatalf("History: %v", err)
	}
	return len(vs)
}

// Append writes a version straight to the store, bypassing any service.
func Append(tb testing.TB, store config.Store, cfg map[string]any) *config.Version {
	tb.Helper()
	v, err := store.Update(context.Background(), func(*config.Version) (*config.Version, error) {
		return &config.Version{Config: cfg, Source: config.SourceCommand}, nil
	})
	if err != nil {
		tb.Fatalf("Update: %v", err)
	}
	return v
}

func testEmpty(t *testing.T, open Opener) {
	store, ctx := open(t), context.Background()
	if err := store.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	v, err := store.Latest(ctx)
	if v != nil || err != nil {
		t.Fatalf("Latest = %v, %v; want nil, nil", v, err)
	}
	v, err = store.LatestWithin(ctx, 10*time.Second)
	if v != nil || err != nil {
		t.Fatalf("LatestWithin = %v, %v; want nil, nil", v, err)
	}
	vs, err := store.History(ctx, 50)
	if len(vs) != 0 || err != nil {
		t.Fatalf("History = %v, %v; want none", vs, err)
	}
}

func testAppendAndRead(t *testing.T, open Opener) {
	store, ctx := open(t), context.Background()
	defaults := settings.Default(nil, settings.ModeShadow).Doc()
	cfg := Doc(t, `{"mode":"off","es2_knn":2,"tiers":{"preview":1},"note":"a <b> & \"c\""}`)
	before := time.Now().Add(-time.Minute)
	first, err := store.Update(ctx, func(latest *config.Version) (*config.Version, error) {
		if latest != nil {
			t.Errorf("latest of an empty store = %+v; want nil", latest)
		}
		return &config.Version{Config: cfg, PreviousConfig: defaults, CreatedBy: "alice",
			Source: config.SourceAPI, Note: "quiet"}, nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if first.ID <= 0 || first.CreatedAt.Before(before) || first.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("appended ID %d at %v; want ID > 0, created now", first.ID, first.CreatedAt)
	}
	got, err := store.Latest(ctx)
	if err != nil || got == nil {
		t.Fatalf("Latest = %v, %v", got, err)
	}
	if got.ID != first.ID || got.CreatedBy != "alice" || got.Source != "api" || got.Note != "quiet" ||
		!got.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("Latest = %+v; want %+v", got, first)
	}
	if g, w := JSON(t, got.Config), JSON(t, cfg); g != w {
		t.Errorf("config = %s; want %s", g, w)
	}
	if g, w := JSON(t, got.PreviousConfig), JSON(t, defaults); g != w {
		t.Errorf("previous_config = %s; want %s", g, w)
	}

	second, err := store.Update(ctx, func(latest *config.Version) (*config.Version, error) {
		if latest == nil || latest.ID != first.ID {
			t.Errorf("latest = %+v; want version %d", latest, first.ID)
		}
		return &config.Version{Config: defaults, Source: config.SourceCommand}, nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if second.ID <= first.ID {
		t.Fatalf("second ID %d; want more than %d", second.ID, first.ID)
	}
	within, err := store.LatestWithin(ctx, 10*time.Second)
	if err != nil || within == nil || within.ID != second.ID || within.CreatedBy != "" ||
		within.Note != "" || within.PreviousConfig != nil {
		t.Fatalf("LatestWithin = %+v, %v; want version %d with no user, note or previous config", within, err, second.ID)
	}
	for _, tc := range []struct{ limit, want int }{{50, 2}, {1, 1}, {0, 1}, {-3, 1}} {
		vs, err := store.History(ctx, tc.limit)
		if err != nil || len(vs) != tc.want {
			t.Fatalf("History(%d) = %d rows, %v; want %d", tc.limit, len(vs), err, tc.want)
		}
		if vs[0].ID != second.ID {
			t.Errorf("History(%d)[0] = version %d; want the newest, %d", tc.limit, vs[0].ID, second.ID)
		}
	}
}

func testUpdateWithoutChange(t *testing.T, open Opener) {
	store, ctx := open(t), context.Background()
	v, err := store.Update(ctx, func(*config.Version) (*config.Version, error) { return nil, nil })
	if v != nil || err != nil {
		t.Fatalf("Update returning nil = %v, %v; want nil, nil", v, err)
	}
	if n := Rows(t, store); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

func testUpdateError(t *testing.T, open Opener) {
	store, ctx := open(t), context.Background()
	errBoom := errors.New("boom")
	_, err := store.Update(ctx, func(*config.Version) (*config.Version, error) {
		return &config.Version{Config: map[string]any{}}, errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update error = %v; want fn's error", err)
	}
	verr := &settings.ValidationError{Messages: []string{"x"}}
	_, err = store.Update(ctx, func(*config.Version) (*config.Version, error) { return nil, verr })
	if got, ok := errors.AsType[*settings.ValidationError](err); !ok || got != verr {
		t.Fatalf("Update error = %v; want the *ValidationError fn returned", err)
	}
	if n := Rows(t, store); n != 0 {
		t.Fatalf("%d rows after failed updates; want 0", n)
	}
}

// testConcurrentUpdates: 20 writers, each appending latest+1; none may
// read a stale latest.
func testConcurrentUpdates(t *testing.T, open Opener) {
	store, ctx := open(t), context.Background()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := store.Update(ctx, func(latest *config.Version) (*config.Version, error) {
				count := 0
				if latest != nil {
					fmt.Sscan(fmt.Sprint(latest.Config["count"]), &count)
				}
				return &config.Version{Config: map[string]any{"count": count + 1}, Source: "api"}, nil
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	v, err := store.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(v.Config["count"]); got != fmt.Sprint(n) {
		t.Fatalf("count = %s after %d serialized increments; want %d", got, n, n)
	}
}
