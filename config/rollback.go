package config

import (
	"context"
	"errors"
	"fmt"

	"github.com/capgate/capgate/settings"
)

// ErrNoVersion is Rollback's error for a version the history does not
// hold.
var ErrNoVersion = errors.New("no such config version")

// ErrNoRollback is Rollback's error for a store that can't read a given
// version (it is no VersionReader).
var ErrNoRollback = errors.New("this config store can't read past versions")

// RollbackReason says why a rollback was refused (RollbackError).
type RollbackReason int

const (
	// NothingToRollBack: no version was ever saved; the defaults are in
	// force.
	NothingToRollBack RollbackReason = iota + 1
	// AlreadyInForce: the config the rollback would restore is the config
	// in force, so it would change nothing.
	AlreadyInForce
	// LastIsRollback: a rollback of the last change, when the last change
	// was itself a rollback: it would bring back what that rollback undid.
	LastIsRollback
	// ChangedMeanwhile: another change was saved between the rollback's
	// read of the history and its write.
	ChangedMeanwhile
)

// RollbackError is a rollback refused because it would not do what its
// caller means (the staff API answers it 409, the CLI exits 1 with it).
// Error says why and what to do instead, in words staff read.
type RollbackError struct {
	Reason RollbackReason
	// Version is the version whose config the rollback would have
	// restored (AlreadyInForce), or, for LastIsRollback, the version
	// before the last: the config the last rollback replaced. 0: none.
	Version int64
	// Latest is the version in force when the rollback was refused; 0:
	// none (the defaults).
	Latest int64
	// Of is, for LastIsRollback, the version the last change restored.
	Of int64
}

func (e *RollbackError) Error() string {
	switch e.Reason {
	case NothingToRollBack:
		return "Nothing to roll back: no change has been saved; the defaults are in force."
	case AlreadyInForce:
		if e.Version == e.Latest {
			return fmt.Sprintf("Version %d is the config in force: nothing to roll back.", e.Version)
		}
		if e.Version == 0 {
			return fmt.Sprintf("The config that rollback would restore is already in force (version %d): nothing to roll back.", e.Latest)
		}
		return fmt.Sprintf("Version %d's config is already in force (version %d): nothing to roll back.", e.Version, e.Latest)
	case LastIsRollback:
		redo := "name the version to restore"
		if e.Version != 0 {
			redo = fmt.Sprintf("roll back to version %d by its number", e.Version)
		}
		return fmt.Sprintf("The last change, version %d, was itself a rollback (to version %d's config): rolling it back would bring back what it undid. To do that, %s.",
			e.Latest, e.Of, redo)
	case ChangedMeanwhile:
		return fmt.Sprintf("The config changed while rolling back (version %d is now in force): read the history and try again.", e.Latest)
	}
	return "rollback refused"
}

// rollbackCheck is what Save checks for a rollback under the writers'
// lock (Edit.rollback).
type rollbackCheck struct {
	latest int64 // the version that must still be the latest (a rollback of the last change); 0: any
	named  int64 // the version whose config is restored; 0: the defaults
}

// before refuses a rollback of the last change when another change came
// since the history was read.
func (c *rollbackCheck) before(latest *Version) error {
	if c == nil || c.latest == 0 {
		return nil
	}
	if latest == nil || latest.ID != c.latest {
		return &RollbackError{Reason: ChangedMeanwhile, Latest: versionID(latest)}
	}
	return nil
}

// unchanged refuses a rollback that would change nothing; a nil check (any
// other save) leaves such a save an answer with no changes.
func (c *rollbackCheck) unchanged(latest *Version) error {
	if c == nil {
		return nil
	}
	return &RollbackError{Reason: AlreadyInForce, Version: c.named, Latest: versionID(latest)}
}

func versionID(v *Version) int64 {
	if v == nil {
		return 0
	}
	return v.ID
}

// Rollback restores a past config as a new version, recorded like any
// change (change.By, Source and Note: who and why), and applied as a Save
// is.
//
// With to > 0 it restores version to's config, with RollbackOf set to to.
// With to == 0 it rolls back the last change: it restores the config in
// force before the newest version (RollbackOf: the version before it; the
// defaults, and no RollbackOf, when the newest is the first), and
// SaveResult.Undid names the version undone.
//
// A rollback that would not do what its caller means is refused with a
// *RollbackError: nothing saved yet (NothingToRollBack), the config
// already in force (AlreadyInForce: so a second rollback sent right after
// a first says so instead of answering no changes), the last change
// being itself a rollback when to == 0 (LastIsRollback: rolling back twice
// would redo the change undone; name the version instead), or another
// change saved meanwhile (ChangedMeanwhile). Rollback fails with
// ErrNoVersion for a version the history does not hold, ErrNoRollback
// for a store that can't read one, and a *settings.ValidationError when
// that version's config is no longer valid.
func (s *Service) Rollback(ctx context.Context, to int64, change Edit) (SaveResult, error) {
	if to == 0 {
		return s.rollbackLast(ctx, change)
	}
	r, ok := s.Store.(VersionReader)
	if !ok {
		return SaveResult{}, ErrNoRollback
	}
	v, err := r.Version(ctx, to)
	if err != nil {
		return SaveResult{}, fmt.Errorf("roll back capacity config: %w", err)
	}
	if v == nil {
		return SaveResult{}, fmt.Errorf("%w: %d", ErrNoVersion, to)
	}
	// Onto the defaults: every version holds its complete config, so the
	// result is that version's config, whatever came since.
	change.Set, change.Replace, change.RollbackOf = settings.Patch(v.Config), true, to
	change.rollback = &rollbackCheck{named: to}
	return s.Save(ctx, change)
}

// rollbackLast is Rollback of the last change.
func (s *Service) rollbackLast(ctx context.Context, change Edit) (SaveResult, error) {
	hist, err := s.Store.History(ctx, 2)
	if err != nil {
		return SaveResult{}, fmt.Errorf("roll back capacity config: %w", err)
	}
	if len(hist) == 0 {
		return SaveResult{}, &RollbackError{Reason: NothingToRollBack}
	}
	last := hist[0]
	var before *Version
	if len(hist) > 1 {
		before = &hist[1]
	}
	if last.RollbackOf != 0 {
		return SaveResult{}, &RollbackError{Reason: LastIsRollback, Latest: last.ID, Of: last.RollbackOf, Version: versionID(before)}
	}
	change.Replace = true
	change.rollback = &rollbackCheck{latest: last.ID}
	if before != nil {
		change.Set, change.RollbackOf = settings.Patch(before.Config), before.ID
		change.rollback.named = before.ID
	} else {
		// The first version: what was in force before it were the
		// defaults. There is no version to name in rollback_of, so the
		// note says what this one is.
		change.Set = nil
		if change.Note == "" {
			change.Note = fmt.Sprintf("rollback of version %d to the defaults", last.ID)
		}
	}
	res, err := s.Save(ctx, change)
	if err != nil {
		return SaveResult{}, err
	}
	res.Undid = last.ID
	return res, nil
}
