package http_test

import (
	"strings"
	"testing"

	"github.com/capgate/capgate/settings"
)

// The standard RateLimit-Policy / RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) name the lane in scope with the
// concurrent-requests quota unit, and browsers may read them.
func TestRateLimitFields(t *testing.T) {
	e := newEnv(t, func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
	}, nil)
	ctx := t.Context()
	// pam (preview) may run one call at a time: the first takes it.
	first := e.async(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "X-Test-Do", "hold",
		"Origin", "https://app.example")
	e.up.waitEntered(t)

	// The second is refused in the user lane, with no room and the retry time.
	r := e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-pam", "Origin", "https://app.example")
	if r.StatusCode != 429 {
		t.Fatalf("status %d, want 429", r.StatusCode)
	}
	if p, l := r.Header.Get("RateLimit-Policy"), r.Header.Get("RateLimit"); p != `"user";q=1;qu="concurrent-requests"` || l != `"user";r=0;t=5` {
		t.Errorf("refused: RateLimit-Policy %q, RateLimit %q; want the user lane, none left, t=5", p, l)
	}
	exposesRateLimit(t, "refused", r.Header.Get("Access-Control-Expose-Headers"))

	e.up.release()
	r = recv(t, first)
	// Admitted: the tightest lane (the user's, now full with this call), no t.
	if p, l := r.Header.Get("RateLimit-Policy"), r.Header.Get("RateLimit"); p != `"user";q=1;qu="concurrent-requests"` || l != `"user";r=0` {
		t.Errorf("admitted: RateLimit-Policy %q, RateLimit %q; want the user lane, none left after this call, no t", p, l)
	}
	exposesRateLimit(t, "admitted", r.Header.Get("Access-Control-Expose-Headers"))

	// cora (core, 3 per user) has room: the lane with the least room left
	// is the cluster's bulk limit (4 − the single-row reserve 1, this call
	// in it).
	r = e.do(ctx, "POST", semanticMatch, twoRows, "Authorization", "Token t-cora")
	if p, l := r.Header.Get("RateLimit-Policy"), r.Header.Get("RateLimit"); p != `"api_heavy";q=3;qu="concurrent-requests"` || l != `"api_heavy";r=2` {
		t.Errorf("core: RateLimit-Policy %q, RateLimit %q", p, l)
	}
}

func exposesRateLimit(t *testing.T, what, list string) {
	t.Helper()
	for _, n := range []string{"RateLimit-Policy", "RateLimit"} {
		found := false
		for f := range strings.SplitSeq(list, ",") {
			if strings.TrimSpace(f) == n {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: Access-Control-Expose-Headers %q lacks %s", what, list, n)
		}
	}
}
