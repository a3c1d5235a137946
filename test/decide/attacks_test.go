package decide

import (
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// The bypass suite's attack list (e2e.Attacks), replayed against the app
// itself: no gateway in front, the middleware deciding inside Django with
// DRF's own reading of the request. The attacks that confused a gateway's
// second reading have nothing to confuse here; the invariants must hold
// all the same: pam (paused) never runs a heavy call.

// attacks are e2e.Attacks and one of the app's own: a body past Django's
// DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB), which request.body enforces and
// DRF's parsers don't, after the padded ones.
func attacks(r *rig) []e2e.Attack {
	a := e2e.Attacks(&r.creds)
	big := e2e.Attack{Name: "app: a body past DATA_UPLOAD_MAX_MEMORY_SIZE", Req: e2e.Request{Target: match,
		Body: `{"rows":[1],"pad":"` + strings.Repeat("x", 3<<20) + `"}`, Headers: []string{r.creds.Token("pam"), jsonCT}}}
	at := slices.IndexFunc(a, func(x e2e.Attack) bool { return x.Name == "row 6: padded and chunked" }) + 1
	return slices.Insert(a, at, big)
}

func TestAttacksThroughMiddleware(t *testing.T) {
	r := suite.Get(t)
	mark := r.mark(t)
	for i, a := range attacks(r) {
		t.Run(a.Name, func(t *testing.T) {
			a.Req.Headers = append(a.Req.Headers, "X-Test-Case: "+a.Name)
			// Any status: 429, or what the view answers a call that is
			// not heavy; the invariants below say whether anything heavy
			// ran.
			t.Logf("statuses %v", e2e.Statuses(t, r.hosts[i%2].addr, a.Req.Raw(), 1))
		})
	}
	for _, x := range r.runs(t, mark) {
		if x.start.User == "pam" {
			t.Errorf("attack %q ran a heavy call of pam (paused)", x.start.Case)
		}
	}
	r.checkInvariants(t, mark, invariantOpts{})
}
