package configtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/settings"
)

// rollbackErr returns err's *config.RollbackError, failing t when it is
// not one of reason.
func rollbackErr(t *testing.T, what string, err error, reason config.RollbackReason) *config.RollbackError {
	t.Helper()
	rerr, ok := errors.AsType[*config.RollbackError](err)
	if !ok || rerr.Reason != reason {
		t.Fatalf("%s: error %v; want a *config.RollbackError of reason %d", what, err, reason)
	}
	return rerr
}

// testRollbackLast: a rollback without a version undoes the last change;
// a second one says the last change was a rollback instead of redoing it;
// a rollback to the config in force says so instead of answering no
// changes (the staff API's rollback sent right after the CLI's).
func testRollbackLast(t *testing.T, open Opener) {
	store := open(t)
	if _, ok := store.(config.VersionReader); !ok {
		t.Skip("the store reads no past versions")
	}
	s, _, _, _ := Service(store)
	ctx := context.Background()

	_, err := s.Rollback(ctx, 0, config.Edit{By: "alice"})
	rollbackErr(t, "rollback with nothing saved", err, config.NothingToRollBack)

	first := mustSave(t, s, `{"mode":"enforce"}`, false, "alice", config.SourceAPI, "enforce")
	second := mustSave(t, s, `{"per_user":{"core":0}}`, false, "alice", config.SourceAPI, "pause core")

	res, err := s.Rollback(ctx, 0, config.Edit{By: "bob", Source: config.SourceCommand, Note: "the pause was a mistake"})
	if err != nil {
		t.Fatalf("rollback of the last change: %v", err)
	}
	wantJSON(t, "its changes", res.Diff, `{"per_user.core":[0,3]}`)
	if res.Version.RollbackOf != first.Version.ID || res.Undid != second.Version.ID || res.Version.Note != "the pause was a mistake" {
		t.Errorf("rollback = rollback_of %d, undid %d, note %q; want %d, %d and the note",
			res.Version.RollbackOf, res.Undid, res.Version.Note, first.Version.ID, second.Version.ID)
	}
	if got := s.Config(ctx); !Same(got, first.Config) {
		t.Errorf("config after the rollback = %+v; want version %d's", got, first.Version.ID)
	}
	rolled := res.Version

	// Again: the last change is now a rollback; rolling it back would
	// bring the pause back. Refused, naming the version to restore.
	_, err = s.Rollback(ctx, 0, config.Edit{By: "bob"})
	rerr := rollbackErr(t, "a rollback of a rollback", err, config.LastIsRollback)
	if rerr.Latest != rolled.ID || rerr.Of != first.Version.ID || rerr.Version != second.Version.ID ||
		!strings.Contains(rerr.Error(), "itself a rollback") {
		t.Errorf("refusal = %+v (%q)", rerr, rerr.Error())
	}

	// By its number the first version is in force already: said so.
	_, err = s.Rollback(ctx, first.Version.ID, config.Edit{By: "carol", Source: config.SourceAPI})
	rerr = rollbackErr(t, "a rollback to the config in force", err, config.AlreadyInForce)
	if rerr.Version != first.Version.ID || rerr.Latest != rolled.ID || !strings.Contains(rerr.Error(), "already in force") {
		t.Errorf("refusal = %+v (%q)", rerr, rerr.Error())
	}
	if n := Rows(t, store); n != 3 {
		t.Errorf("%d rows; want 3 (no row for a refused rollback)", n)
	}

	// By its number a rollback may redo what a rollback undid.
	res, err = s.Rollback(ctx, second.Version.ID, config.Edit{By: "carol"})
	if err != nil || res.Version.RollbackOf != second.Version.ID {
		t.Fatalf("rollback to version %d: %+v, %v", second.Version.ID, res.Version, err)
	}
	if got := s.Config(ctx); !Same(got, second.Config) {
		t.Errorf("config = %+v; want version %d's", got, second.Version.ID)
	}
	_, err = s.Rollback(ctx, 999999, config.Edit{})
	if !errors.Is(err, config.ErrNoVersion) {
		t.Errorf("rollback to a missing version: %v; want ErrNoVersion", err)
	}
}

// testRollbackFirst: rolling back the only change restores the defaults,
// with a note saying so (no version to name).
func testRollbackFirst(t *testing.T, open Opener) {
	store := open(t)
	if _, ok := store.(config.VersionReader); !ok {
		t.Skip("the store reads no past versions")
	}
	s, _, _, _ := Service(store)
	ctx := context.Background()
	only := mustSave(t, s, `{"mode":"off"}`, false, "alice", config.SourceAPI, "")
	res, err := s.Rollback(ctx, 0, config.Edit{By: "bob"})
	if err != nil {
		t.Fatalf("rollback of the only change: %v", err)
	}
	if !Same(res.Config, settings.Default(nil, settings.ModeShadow)) || res.Undid != only.Version.ID || res.Version.RollbackOf != 0 ||
		!strings.Contains(res.Version.Note, "to the defaults") {
		t.Errorf("rollback = %+v, undid %d, note %q; want the defaults, undid %d", res.Version, res.Undid, res.Version.Note, only.Version.ID)
	}
}

// historyHook is a store whose History runs a hook after it reads: another
// writer saving between a rollback's read and its write.
type historyHook struct {
	config.Store
	after func()
}

func (h *historyHook) History(ctx context.Context, limit int) ([]config.Version, error) {
	vs, err := h.Store.History(ctx, limit)
	if h.after != nil {
		h.after()
	}
	return vs, err
}

// testRollbackRace: a change saved between a rollback's read of the
// history and its write is not overwritten: the rollback is refused.
func testRollbackRace(t *testing.T, open Opener) {
	store := open(t)
	hooked := &historyHook{Store: store}
	s, _, _, _ := Service(hooked)
	other, _, _, _ := Service(store)
	mustSave(t, s, `{"mode":"enforce"}`, false, "alice", config.SourceAPI, "")
	mustSave(t, s, `{"es2_knn":1}`, false, "alice", config.SourceAPI, "")
	var meanwhile *config.Version
	hooked.after = func() {
		hooked.after = nil
		meanwhile = mustSave(t, other, `{"tiers":{"preview":1}}`, false, "dave", config.SourceAPI, "").Version
	}
	_, err := s.Rollback(context.Background(), 0, config.Edit{By: "bob"})
	rerr := rollbackErr(t, "a rollback racing a change", err, config.ChangedMeanwhile)
	if rerr.Latest != meanwhile.ID {
		t.Errorf("refusal names version %d; want %d", rerr.Latest, meanwhile.ID)
	}
	if n := Rows(t, store); n != 3 {
		t.Errorf("%d rows; want 3", n)
	}
}
