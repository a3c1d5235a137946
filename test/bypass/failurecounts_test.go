package bypass

import (
	"fmt"
	"github.com/capgate/capgate/test/internal/e2e"
	"sync"
	"testing"
)

func TestJunkCookieFlood(t *testing.T) {
	// The second attack run: pam (limit 0) sends 300 heavy calls at once by
	// her session, each with a junk cookie of its own, so that every one
	// missed the identity cache; the lookups queued at the API, timed out,
	// and the calls ran as "unavailable". The cache key is now the session
	// alone, and a lookup that fails still counts.
	r := suite.Get(t)
	mark := r.mark(t)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			q := e2e.Request{Target: match, Body: oneRow, Headers: []string{jsonCT, "X-Test-Hold-Ms: 200", "X-Test-Case: junk cookie flood",
				fmt.Sprintf("Cookie: junk%d=%d; sessionid=%s; csrftoken=%s", i, i, r.creds.Sessions["pam"], r.creds.CSRF),
				"X-CSRFToken: " + r.creds.CSRF}}
			e2e.Statuses(t, r.gateways[gwUpstream].addr, q.Raw(), 1)
		})
	}
	wg.Wait()
	r.checkInvariants(t, mark)
}
