package policy_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// aliasBomb returns the base policy with its one route's `when` replaced
// by k predicates of an `any` of k predicates, and k copies of that route:
// anchors and aliases at the `any`, `when` and route levels, so the file
// stays small (a few KB) while the policy it names holds about 3·k³ YAML
// nodes. The decoder follows aliases, so it would build all of them.
func aliasBomb(k int) string {
	var b strings.Builder
	b.WriteString("version: 1\nname: t\nroutes:\n")
	// The `any` level: one predicate, then k-1 aliases of it.
	b.WriteString("  - &route\n    name: a\n    method: POST\n    path: {exact: /a}\n    when: &when\n")
	b.WriteString("      - any: &any\n          - &pred {query_truthy: flag}\n")
	for range k - 1 {
		b.WriteString("          - *pred\n")
	}
	// The `when` level: k-1 more `any`s, each an alias of the first.
	for range k - 1 {
		b.WriteString("      - any: *any\n")
	}
	// The route level: k-1 aliases of the route (each also a route given
	// twice, which the decoder would report once per copy).
	for range k - 1 {
		b.WriteString("  - *route\n")
	}
	b.WriteString(base[strings.Index(base, "identity:"):]) // base's identity, lanes and names
	return b.String()
}

// Why: the decoder followed aliases itself, so aliases at the route, when
// and any levels multiplied: a 21.5 KB policy took `capgate policy check`
// past 1.5 GiB and out of memory. A policy is now refused, before it is
// decoded, once its nodes with every alias expanded pass policy.MaxNodes.
func TestAliasBombIsRefused(t *testing.T) {
	// 40 at each level: about 200,000 nodes from a 3 KB file (the old
	// decoder built them all, and reported the route given 39 times).
	bomb := aliasBomb(40)
	if len(bomb) > 4<<10 {
		t.Fatalf("the bomb is %d bytes; want a small file", len(bomb))
	}
	_, err := policy.Parse("bomb.yaml", []byte(bomb))
	var es policy.Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("Parse(bomb) = %v; want one error: the node budget", err)
	}
	if msg := es[0].Error(); !strings.HasPrefix(msg, "bomb.yaml:") || !strings.Contains(msg, fmt.Sprint(policy.MaxNodes)) || !strings.Contains(msg, "alias") {
		t.Errorf("error %q; want the file, the node budget (%d) and aliases named", msg, policy.MaxNodes)
	}

	// The size: 64 at each level of the file, nested further
	// (each any alias holding the whole when before it) is refused as
	// fast: the budget is counted without expanding anything.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	if _, err := policy.Parse("laughs.yaml", []byte(b.String())); err == nil || !strings.Contains(err.Error(), fmt.Sprint(policy.MaxNodes)) {
		t.Errorf("Parse(10^40 nodes) = %v; want the node budget", err)
	}

	// Aliases within the budget are fine: a few copies of the route's
	// `any` (distinct route names, so the policy checks).
	small := strings.Replace(aliasBomb(3), "  - *route\n  - *route\n", "", 1)
	if _, err := policy.Parse("small.yaml", []byte(small)); err != nil {
		t.Errorf("a policy with a few aliases: %v", err)
	}
}

// Why: nothing bounded the file either. Parse refuses more than
// policy.MaxBytes, and Load reads no more than that of a file.
func TestPolicyFileSizeIsCapped(t *testing.T) {
	big := base + "# " + strings.Repeat("x", policy.MaxBytes) + "\n"
	_, err := policy.Parse("big.yaml", []byte(big))
	if err == nil || !strings.Contains(err.Error(), "big.yaml") || !strings.Contains(err.Error(), fmt.Sprint(policy.MaxBytes)) {
		t.Errorf("Parse(%d bytes) = %v; want refused, naming the file and the cap", len(big), err)
	}
	// A file past the cap is refused by Load too (it reads at most the
	// cap and a byte, so /dev/zero would not be read whole).
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(path); err == nil || !strings.Contains(err.Error(), fmt.Sprint(policy.MaxBytes)) {
		t.Errorf("Load(%d bytes) = %v; want refused with the cap", len(big), err)
	}
	// Just under the cap is read.
	fits := base + "# " + strings.Repeat("x", policy.MaxBytes-len(base)-3) + "\n"
	if _, err := policy.Parse("fits.yaml", []byte(fits)); err != nil {
		t.Errorf("Parse(%d bytes) = %v; want it read", len(fits), err)
	}
}
