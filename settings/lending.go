package settings

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/capgate/capgate/internal/jsontree"
)

// LendingKey is the optional config key of the seats each lane with a
// reserve lends: {"lending": {"<lane>": N}}, N of the seats it reserves for
// its class that the lane's other calls may borrow while the class leaves
// them idle. Absent from the document when no lane lends, so a policy whose
// lanes lend nothing (the built-in one by default) has the config it had.
const LendingKey = "lending"

// Lend returns the seats lane (the policy's lane index) lends of its
// reserve; 0 for a lane without a reserve or that lends none.
func (c Config) Lend(lane int) int {
	if c.lending != nil {
		if lane < 0 || lane >= len(c.lending) {
			return 0
		}
		return c.lending[lane]
	}
	p := c.Policy()
	if lane < 0 || lane >= len(p.Lanes) || p.Lanes[lane].Reserve == nil {
		return 0
	}
	return p.Lanes[lane].Reserve.Lend
}

// lendingDoc returns the "lending" object of c's document: every lane with
// a reserve, by name, when one of them lends; nil when none does.
func (c Config) lendingDoc() map[string]any {
	p := c.Policy()
	var out map[string]any
	lends := false
	for i, l := range p.Lanes {
		if l.Reserve == nil {
			continue
		}
		n := c.Lend(i)
		lends = lends || n > 0
		if out == nil {
			out = map[string]any{}
		}
		out[l.Name] = json.Number(strconv.Itoa(n))
	}
	if !lends {
		return nil
	}
	return out
}

// lendLanes returns the names of the lanes of s's policy with a reserve,
// in its order: the keys "lending" may have.
func (s *schema) lendLanes() []string {
	var out []string
	for _, l := range s.p.Lanes {
		if l.Reserve != nil {
			out = append(out, l.Name)
		}
	}
	return out
}

// parseLending reads the "lending" value v onto c, whose lane numbers are
// set: every problem found, as validation messages. null means the
// policy's defaults.
func (s *schema) parseLending(v any, c *Config) []string {
	if v == nil {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%q must be an object.", LendingKey)}
	}
	lanes := s.lendLanes()
	var errs []string
	lending := make([]int, len(s.p.Lanes))
	for i, l := range s.p.Lanes {
		if l.Reserve != nil {
			lending[i] = l.Reserve.Lend
		}
	}
	for i, l := range s.p.Lanes {
		lv, ok := obj[l.Name]
		if !ok || l.Reserve == nil {
			continue
		}
		key := LendingKey + "." + l.Name
		n, isInt := jsontree.WholeNumber(lv)
		if !isInt || n < 0 || n > MaxNumber {
			errs = append(errs, fmt.Sprintf("%q must be a whole number from 0 to %d.", key, MaxNumber))
			continue
		}
		if r := c.Reserve(i); int(n) > r {
			errs = append(errs, fmt.Sprintf(`%q (%d) can't be more than %q (%d): a lane lends only the seats it reserves.`,
				key, n, l.Reserve.Config, r))
			continue
		}
		lending[i] = int(n)
	}
	errs = append(errs, unknownLanes(obj, lanes, LendingKey, "lending is for the lanes with a reserve")...)
	if len(errs) == 0 {
		c.lending = lending
	}
	return errs
}

// unknownLanes returns the messages of the keys of obj (the object of the
// optional config key key) that are not one of lanes, sorted: "Unknown
// setting "<key>.<lane>": <what>: <lanes>."
func unknownLanes(obj map[string]any, lanes []string, key, what string) []string {
	var unknown []string
	for k := range obj {
		if !slices.Contains(lanes, k) {
			names := "no lane of this policy"
			if len(lanes) > 0 {
				names = strings.Join(lanes, ", ")
			}
			unknown = append(unknown, fmt.Sprintf("Unknown setting %q: %s: %s.", key+"."+k, what, names))
		}
	}
	sort.Strings(unknown)
	return unknown
}
