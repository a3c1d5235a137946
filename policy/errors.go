package policy

import (
	"fmt"
	"strings"

	"github.com/capgate/capgate/internal/editdist"
)

// Error is one thing wrong with a policy file: where, which field, what.
type Error struct {
	File  string
	Line  int    // 1-based; 0 when unknown
	Field string // the field's path, e.g. "lanes[2].limit.core"; "" for the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every Error of a policy, in file order; Parse returns it. Its
// Error is one line per error.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// nearest returns the candidate closest to s by edit distance, if it is
// close enough to be a likely typo.
func nearest(s string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editdist.Distance(strings.ToLower(s), c)
		if len(s) >= 3 && (strings.HasPrefix(c, s) || strings.HasPrefix(s, c)) {
			d = min(d, 1) // a cut or extended name
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(2, len(s)/3) {
		return "", false
	}
	return best, true
}

// suggest returns the message for an unknown name: the nearest valid one,
// else the list of valid ones.
func suggest(what, s string, candidates []string) string {
	if n, ok := nearest(s, candidates); ok {
		return fmt.Sprintf("unknown %s %q (did you mean %q?)", what, s, n)
	}
	if len(candidates) == 0 {
		return fmt.Sprintf("unknown %s %q (the policy names none)", what, s)
	}
	return fmt.Sprintf("unknown %s %q (valid: %s)", what, s, strings.Join(candidates, ", "))
}
