package bypass

import (
	"fmt"
	"sync"
	"testing"
)

func TestJunkCookieFlood(t *testing.T) {
	// The second attack run: pam (limit 0) sends 300 heavy calls at once by
	// her session, each with a junk cookie of its own, so that every one
	// missed the identity cache; the lookups queued at the API, timed out,
	// and the calls ran as "unavailable". The cache key is now the session
	// alone, and a lookup that fails still counts.
	r := getRig(t)
	mark := r.mark(t)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			q := request{target: match, body: oneRow, headers: []string{jsonCT, "X-Test-Hold-Ms: 200", "X-Test-Case: junk cookie flood",
				fmt.Sprintf("Cookie: junk%d=%d; sessionid=%s; csrftoken=%s", i, i, r.creds.Sessions["pam"], r.creds.CSRF),
				"X-CSRFToken: " + r.creds.CSRF}}
			send(t, r.gateways[gwUpstream].addr, q.raw(), 1)
		})
	}
	wg.Wait()
	r.checkInvariants(t, mark)
}
