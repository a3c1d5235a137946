package bypass

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// TestAttacks sends the attack list (e2e.Attacks, and the second attack
// run's e2e.SecondReadingAttacks) one by one through the rig; pam's heavy
// calls must all be refused (per_user.preview 0), so each one the upstream
// runs is a bypass. docs/SECURITY.md lists them.
func TestAttacks(t *testing.T) {
	r := suite.Get(t)
	mark := r.mark(t)
	for _, a := range append(e2e.Attacks(&r.creds), e2e.SecondReadingAttacks(&r.creds)...) {
		t.Run(a.Name, func(t *testing.T) {
			a.Req.Headers = append(a.Req.Headers, "X-Test-Case: "+a.Name)
			got := e2e.Statuses(t, r.gateways[gatewayID(a.Via)].addr, a.Req.Raw(), 1)
			if a.Want != e2e.AnyStatus && !slices.Equal(got, []int{a.Want}) {
				t.Errorf("statuses %v, want [%d]", got, a.Want)
			}
		})
	}
	r.checkInvariants(t, mark)
}

func TestNoH2C(t *testing.T) {
	// The HTTP/2 prior-knowledge preface, then (were it accepted) frames
	// carrying heavy calls: refused before anything reaches the API.
	r := suite.Get(t)
	mark := r.mark(t)
	got := e2e.Statuses(t, r.gateways[gwUpstream].addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"+
		e2e.Request{Target: match, Body: oneRow, Headers: []string{r.creds.Token("pam"), jsonCT}}.Raw(), 2)
	if len(got) == 0 || got[0] != http.StatusHTTPVersionNotSupported {
		t.Errorf("statuses %v, want 505 first", got)
	}
	r.checkInvariants(t, mark)
}

func TestPipelinedRequests(t *testing.T) {
	r := suite.Get(t)
	mark := r.mark(t)
	pam := r.creds.Token("pam")
	heavy := e2e.Request{Target: match, Body: oneRow, Headers: []string{pam, jsonCT}, KeepAlive: true}
	light := e2e.Request{Target: "/concepts/$match/", Body: oneRow, Headers: []string{pam, jsonCT}, KeepAlive: true}
	last := heavy
	last.KeepAlive = false
	got := e2e.Statuses(t, r.gateways[gwUpstream].addr, light.Raw()+heavy.Raw()+light.Raw()+last.Raw(), 4)
	if want := []int{200, refused, 200, refused}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	r.checkInvariants(t, mark)
}

func TestUserAtLimitOne(t *testing.T) {
	// cora (core, per_user 1) sends 8 calls at once, each held 1 s by
	// the upstream: it runs one at a time, never two.
	r := suite.Get(t)
	mark := r.mark(t)
	for _, gw := range []gatewayID{gwUpstream, gwTokens} {
		var wg sync.WaitGroup
		statuses := make([]int, 8)
		for i := range statuses {
			wg.Go(func() {
				q := e2e.Request{Target: match, Body: oneRow, Headers: []string{r.creds.Token("cora"), jsonCT, "X-Test-Hold-Ms: 1000"}}
				if s := e2e.Statuses(t, r.gateways[gw].addr, q.Raw(), 1); len(s) == 1 {
					statuses[i] = s[0]
				}
			})
		}
		wg.Wait()
		if !slices.Contains(statuses, 200) || !slices.Contains(statuses, refused) {
			t.Errorf("%s: statuses %v, want some admitted and some refused", gw, statuses)
		}
	}
	r.checkInvariants(t, mark)
}

func TestFloodOfOneUser(t *testing.T) {
	// 200 calls at once from pam (limit 0) and 20 from cora (limit 1) on the
	// in-process lanes. (Issue 12 row 1, the Redis store's busy queue, is
	// TestFloodOnRedis.)
	r := suite.Get(t)
	mark := r.mark(t)
	var wg sync.WaitGroup
	for i := range 220 {
		user := "pam"
		if i%11 == 0 {
			user = "cora"
		}
		wg.Go(func() {
			q := e2e.Request{Target: match, Body: oneRow, Headers: []string{r.creds.Token(user), jsonCT, "X-Test-Hold-Ms: 100"}}
			e2e.Statuses(t, r.gateways[gwUpstream].addr, q.Raw(), 1)
		})
	}
	wg.Wait()
	r.checkInvariants(t, mark)
}

func TestNoCallerBecomesStaff(t *testing.T) {
	r := suite.Get(t)
	mark := r.mark(t)
	up := r.gateways[gwUpstream].addr
	for _, tt := range []struct {
		name, gw string
		hdr      []string
		want     int
	}{
		{"pam's token", up, []string{r.creds.Token("pam")}, http.StatusForbidden},
		{"pam's session (cookies are never a staff credential)", up, r.creds.Session("pam"), http.StatusUnauthorized},
		{"stan's session (cookies are never a staff credential)", up, r.creds.Session("stan"), http.StatusUnauthorized},
		{"pam's token and spoofed X-Capgate-*", up, []string{r.creds.Token("pam"), "X-Capgate-User: stan", "X-Capgate-Staff: true"}, http.StatusForbidden},
		{"spoofed X-Capgate-* on the header gateway", r.gateways[gwHeader].addr, []string{"X-Capgate-User: stan", "X-Capgate-Staff: true"}, http.StatusUnauthorized},
		{"pam's token and stan's session", up, append([]string{r.creds.Token("pam")}, r.creds.Session("stan")...), http.StatusForbidden},
		{"an invalid token and stan's session", up, append([]string{"Authorization: Token nope"}, r.creds.Session("stan")...), http.StatusUnauthorized},
	} {
		q := e2e.Request{Method: "PATCH", Target: "/capacity/config/", Body: `{"mode":"off"}`, Headers: append(tt.hdr, jsonCT)}
		if got := e2e.Statuses(t, tt.gw, q.Raw(), 1); !slices.Equal(got, []int{tt.want}) {
			t.Errorf("%s: PATCH /capacity/config/ = %v, want %d", tt.name, got, tt.want)
		}
	}
	// The config is still in force: pam is still refused.
	q := e2e.Request{Target: match, Body: oneRow, Headers: []string{r.creds.Token("pam"), jsonCT}}
	if got := e2e.Statuses(t, up, q.Raw(), 1); !slices.Equal(got, []int{refused}) {
		t.Errorf("after the attempts pam's heavy call = %v, want 429", got)
	}
	r.checkInvariants(t, mark)
}

func TestMetricsAndCORS(t *testing.T) {
	r := suite.Get(t)
	mark := r.mark(t)
	up := r.gateways[gwUpstream].addr
	for _, tt := range []struct {
		hdr  []string
		want int
	}{{nil, 401}, {[]string{r.creds.Token("pam")}, 403}, {[]string{r.creds.Token("stan")}, 200}} {
		q := e2e.Request{Method: "GET", Target: "/metrics", Headers: tt.hdr}
		if got := e2e.Statuses(t, up, q.Raw(), 1); !slices.Equal(got, []int{tt.want}) {
			t.Errorf("GET /metrics with %v = %v, want %d", tt.hdr, got, tt.want)
		}
	}
	// A 429 for an origin nobody listed is readable but never with
	// credentials.
	req, _ := http.NewRequest("POST", "http://"+up+match, strings.NewReader(oneRow))
	req.Header.Set("Authorization", "Token "+r.creds.Tokens["pam"])
	req.Header.Set("Origin", "https://evil.test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != refused || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("429 for an unlisted origin: %d, credentials %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Credentials"))
	}
	r.checkInvariants(t, mark)
}
