package capgate

import (
	"strings"

	"github.com/capgate/capgate/internal/jsontree"
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

// ValidationError is a change that would make an invalid config. Messages
// holds every problem found, with the original implementation's texts. It
// matches ErrInvalidConfig with errors.Is.
type ValidationError struct {
	Messages []string
}

// Error returns the messages joined by spaces.
func (e *ValidationError) Error() string { return strings.Join(e.Messages, " ") }

// Is reports whether target is ErrInvalidConfig.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidConfig }

// Apply returns c with the patch change merged in, and what that changed
// (empty, never nil, when nothing did). A setting of change that a Config
// lacks is not dropped but makes the result invalid (`Unknown setting
// "x".`). When the result is not a valid config Apply returns the zero
// Config, a nil Diff and a *ValidationError holding every problem found. It modifies
// neither c nor change.
func (c Config) Apply(change Patch) (Config, Diff, error) {
	old := c.Doc()
	next, msgs := configFromDoc(jsontree.Merge(old, change, false))
	if len(msgs) > 0 {
		return Config{}, nil, &ValidationError{Messages: msgs}
	}
	return next, Diff(jsontree.Diff(old, next.Doc())), nil
}
