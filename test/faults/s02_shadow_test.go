//go:build faults

package faults

import (
	"bytes"
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// gatewayHeaders are the headers a gated response may add to the API's.
func gatewayHeader(name string) bool {
	n := http.CanonicalHeaderKey(name)
	return strings.HasPrefix(n, "X-Ocl-Capacity-") || n == "Date" || n == "Access-Control-Expose-Headers" ||
		n == "X-Request-Id" || n == "Ratelimit" || n == "Ratelimit-Policy"
}

// apiHeaders is h without the headers the gateway adds, as "k: v" lines.
func apiHeaders(h http.Header) string {
	var lines []string
	for k, vs := range h {
		if gatewayHeader(k) {
			continue
		}
		lines = append(lines, k+": "+strings.Join(vs, ", "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestS02ShadowChangesNothing(t *testing.T) {
	figures := begin(t, 2)
	r := newRig(t, rigOptions{Gateways: 3, DB: "s02", Config: limitsConfig("shadow"),
		Env: []string{"CAPACITY_REDIS_DEADLINE_SECONDS=5", "CAPACITY_REDIS_TIMEOUT_SECONDS=3"}})
	// What the API answers directly, per kind (simapi's answers depend only
	// on the kind and the rows).
	direct := map[string]result{}
	upURL := r.up.listen(t, "direct")
	for _, k := range allKinds {
		x := call(context.Background(), upURL, "grace", k, nil)
		if x.err != nil || x.status != http.StatusOK {
			t.Fatalf("direct %s: %d %v", k.name, x.status, x.err)
		}
		direct[k.name] = x
	}
	r.up.reset()

	dur := duration(20*time.Second, 8*time.Second)
	res := runLoad(context.Background(), loadSpec{Gateways: r.urls(), Clients: 40, Duration: dur, Users: loadUsers})
	_, peak, upCalls := r.up.snapshot()
	c := count(res)
	differ := 0
	for _, x := range res {
		if x.err != nil || x.status != http.StatusOK {
			t.Errorf("call %s (%s as %s): status %d err %v: shadow must refuse nothing", x.id, x.kind, x.user, x.status, x.err)
			continue
		}
		if x.decision != "admitted" && x.decision != "shadow-refused" {
			t.Errorf("call %s: decision %q, want admitted or shadow-refused", x.id, x.decision)
		}
		if x.header.Get("Retry-After") != "" {
			t.Errorf("call %s: Retry-After %q in shadow mode", x.id, x.header.Get("Retry-After"))
		}
		d := direct[x.kind]
		if !bytes.Equal(x.body, d.body) || apiHeaders(x.header) != apiHeaders(d.header) {
			differ++
			if differ <= 3 {
				t.Errorf("call %s (%s): response differs from a direct call:\n%s\n%s\nvs\n%s\n%s", x.id, x.kind,
					apiHeaders(x.header), x.body, apiHeaders(d.header), d.body)
			}
		}
	}
	if upCalls != c.calls {
		t.Errorf("upstream served %d heavy calls of %d sent: every call must reach it in shadow", upCalls, c.calls)
	}
	if c.byDecided["shadow-refused"] == 0 {
		t.Errorf("no call was shadow-refused: the load did not reach the limits (%v)", c)
	}
	took, err := lanesEmpty(t, r.rc, 3*time.Second)
	if err != nil {
		t.Errorf("lanes after the load: %v", err)
	}
	figures("3 gateways, 40 clients, %v, the limits of scenario 1 in shadow: %d calls, %d reached the upstream, %d refused, %d admitted + %d shadow-refused; %d responses differ from a direct call (body byte for byte, headers but the capacity ones); upstream peak api_heavy %d (limit 4) as shadow allows; lanes empty %v after",
		dur, c.calls, upCalls, c.byStatus[429], c.byDecided["admitted"], c.byDecided["shadow-refused"], differ,
		peak.Total, took.Round(time.Millisecond))
}
