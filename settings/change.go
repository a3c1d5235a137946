package settings

import (
	"errors"
	"fmt"
	"strings"

	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/tune"
)

// The words for a change to the config, one per thing:
//   - Patch: the settings to change (what staff send), the input of
//     Config.Apply.
//   - Diff: what a change did, setting by setting, old and new; the output
//     of Config.Apply, of config.Version.Diff and config.SaveResult.Diff
//     (the "changes" of the staff API, the CLI and the log line).
//   - config.Edit: one save for config.Service.Save, a Patch plus who made
//     it, where from and whether it replaces the config.
//   - config.Version: a saved change, one row of the history.

// Patch is a partial config document: the settings to change, as JSON
// decodes them (objects as map[string]any, numbers as json.Number or Go
// integers), e.g. {"tiers": {"preview": 1}, "mode": "enforce"}. An object
// is merged into the setting it names (a JSON merge patch); any other
// value replaces it. A nil or empty Patch changes nothing.
type Patch map[string]any

// Diff is what a change did, per setting: {"dotted.path": [old, new]},
// e.g. {"tiers.preview": [2, 1]}, the old and new values as JSON decodes
// them (a setting one side lacks is nil). Empty when nothing changed.
type Diff map[string][2]any

// ErrInvalid is matched (errors.Is) by the error of a change or a stored
// config that is invalid: a *ValidationError from Config.Apply and
// config.Service.Save, and the error of Config.Overlay that config.Service
// logs for an invalid stored version.
var ErrInvalid = errors.New("capacity config is invalid")

// ValidationError is a change that would make an invalid config. Messages
// holds every problem found, with the original implementation's texts. It
// matches ErrInvalid with errors.Is.
type ValidationError struct {
	Messages []string
}

// Error returns the messages joined by spaces.
func (e *ValidationError) Error() string { return strings.Join(e.Messages, " ") }

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Apply returns c with the patch change merged in, and what that changed
// (empty, never nil, when nothing did). A setting of change that a Config
// lacks is not dropped but makes the result invalid (`Unknown setting
// "x".`). When the result is not a valid config Apply returns the zero
// Config, a nil Diff and a *ValidationError holding every problem found.
// It modifies neither c nor change.
func (c Config) Apply(change Patch) (Config, Diff, error) {
	old := c.Doc()
	next, msgs := c.sch().fromDoc(jsontree.Merge(old, flatKeyLimits(change), false))
	if len(msgs) > 0 {
		return Config{}, nil, &ValidationError{Messages: msgs}
	}
	return next, Diff(jsontree.Diff(old, next.Doc())), nil
}

// Overlay reads a stored config document on top of c (the defaults, as
// config.Service calls it): c overlaid with the keys stored that are still
// known, so retired keys (and the keys of another policy) are ignored and
// new ones keep c's values. A nil stored gives c. Unlike Apply, unknown
// keys are not an error: a stored row may predate a key's retirement. An
// invalid result returns c and an error wrapping ErrInvalid, "capacity
// config is invalid (<messages>); using the defaults", which the caller
// logs.
func (c Config) Overlay(stored map[string]any) (Config, error) {
	if stored == nil {
		return c, nil
	}
	merged := jsontree.Merge(c.Doc(), stored, true)
	for _, k := range []string{tune.ConfigKey, LendingKey} {
		if a, ok := stored[k]; ok {
			merged = jsontree.Merge(merged, map[string]any{k: a}, false) // optional, so not in the defaults
		}
	}
	if a, ok := stored[KeyLimitsKey]; ok {
		// Each lane's values whole: one the defaults have and the stored
		// version removed stays removed.
		merged[KeyLimitsKey] = overlayKeyLimits(merged[KeyLimitsKey], a)
	}
	next, errs := c.sch().fromDoc(merged)
	if len(errs) > 0 {
		return c, fmt.Errorf("%w (%s); using the defaults", ErrInvalid, strings.Join(errs, " "))
	}
	return next, nil
}

// Validate checks a whole config document of c's policy: every problem
// found, as Apply reports them; none for a valid one.
func (c Config) Validate(doc map[string]any) []string { return c.sch().validate(doc) }
