package http_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// The one identity rule, for every resolver: a call with no credential
// at all (no Authorization, no Cookie) passes untouched, the API answering
// it; a credential the resolver can't verify is gated as "(anonymous)" of
// the default tier (or, with identity.unverified: refuse, answered 401 in
// enforce), never passed ungated.

const (
	jwtIssuer   = "https://auth.example.com"
	jwtAudience = "capgate"
)

// jwtFixture is a JWT resolver over a key set of one key (kid "k1"), the
// key, another the set lacks (an IdP's rotated key), and the resolver's
// clock.
type jwtFixture struct {
	key, rotated *ecdsa.PrivateKey
	ids          *identity.JWT
}

func newJWTFixture(t *testing.T) *jwtFixture {
	t.Helper()
	f := &jwtFixture{}
	var err error
	if f.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if f.rotated, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	pub := jose.JSONWebKey{Key: f.key, KeyID: "k1", Algorithm: string(jose.ES256), Use: "sig"}
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{pub.Public()}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f.ids, err = identity.NewJWT(identity.JWTOptions{JWKSFile: path, Issuer: jwtIssuer, Audience: jwtAudience,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// claims returns the claims of a good token of sub, changed by edit.
func (f *jwtFixture) claims(sub string, edit func(map[string]any)) map[string]any {
	c := map[string]any{"iss": jwtIssuer, "aud": jwtAudience, "sub": sub,
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(c)
	}
	return c
}

// sign returns claims signed with ES256 by priv, the header naming kid.
func (f *jwtFixture) sign(t *testing.T, priv *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := sig.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// cred is a credential by name: an Authorization value, or "" for a
// session cookie.
type cred struct{ name, auth string }

// unverifiable returns credentials the fixture's resolver refuses: the
// attack run's three first (expired 45 s ago, signed by a key the set
// lacks yet, for another audience), then the rest it already refused.
func (f *jwtFixture) unverifiable(t *testing.T) []cred {
	t.Helper()
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	bearer := func(priv *ecdsa.PrivateKey, kid string, edit func(map[string]any)) string {
		return "Bearer " + f.sign(t, priv, kid, f.claims("cora", edit))
	}
	return []cred{
		{"expired 45 s ago", bearer(f.key, "k1", func(c map[string]any) { c["exp"] = now.Add(-45 * time.Second).Unix() })},
		{"a rotated key", bearer(f.rotated, "k2", nil)},
		{"another audience", bearer(f.key, "k1", func(c map[string]any) { c["aud"] = "other-api" })},
		{"the rotated key under the old kid", bearer(f.rotated, "k1", nil)},
		{"another issuer", bearer(f.key, "k1", func(c map[string]any) { c["iss"] = "https://evil.example" })},
		{"no exp", bearer(f.key, "k1", func(c map[string]any) { delete(c, "exp") })},
		{"issued in the future", bearer(f.key, "k1", func(c map[string]any) { c["iat"] = now.Add(time.Hour).Unix() })},
		{"sub not a string", bearer(f.key, "k1", func(c map[string]any) { c["sub"] = 7 })},
		{"alg none", "Bearer " + seg(map[string]string{"alg": "none", "kid": "k1"}) + "." + seg(f.claims("cora", nil)) + "."},
		{"malformed", "Bearer not.a.jwt"},
		{"over 8 KiB", "Bearer " + strings.Repeat("a", 9<<10)},
		{"another scheme", "Token " + f.sign(t, f.key, "k1", f.claims("cora", nil))},
		{"a session cookie", ""},
	}
}

// ruleEnv is a gateway under policy p in mode, enforcing for all, with
// the resolver gc sets: every user (and "(anonymous)") runs one call at a
// time.
func ruleEnv(t *testing.T, p *policy.Policy, mode settings.Mode, gc func(*capgatehttp.GatewayConfig)) *env {
	t.Helper()
	return newPolicyEnv(t, p, func(c *settings.Config) {
		c.Mode, c.EnforceFor = mode, settings.EnforceAll
		setNumber(c, "per_user.preview", 1)
		setNumber(c, "per_user.core", 1)
	}, gc)
}

// credHeaders returns the request headers carrying c.
func credHeaders(c cred) []string {
	if c.auth == "" {
		return []string{"Cookie", "sessionid=s-unknown"}
	}
	return []string{"Authorization", c.auth}
}

// checkGatedAsAnonymous sends 4 heavy calls at once with the first of
// creds, each held at the API: one runs, as (anonymous), and the 3 others
// are refused (the limit-1 user of the attack run ran all 4). While it
// runs, a call with each other credential is refused too: they share
// (anonymous)'s one place. A call with no credential at all passes
// untouched (the API answers it). extra headers go with every call.
func checkGatedAsAnonymous(t *testing.T, e *env, creds []cred, extra ...string) {
	t.Helper()
	first := creds[0]
	done := make(chan response, 4)
	for range 4 {
		ch := e.async(t.Context(), "POST", semanticMatch, oneRow, append(append(credHeaders(first), extra...), "X-Test-Do", "hold")...)
		go func() { done <- recv(t, ch) }()
	}
	e.up.waitEntered(t)
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for range 3 {
		select {
		case r := <-done:
			if r.StatusCode != http.StatusTooManyRequests {
				t.Errorf("%s, 4 at once: %d; want one run and three 429", first.name, r.StatusCode)
			}
		case <-e.up.entered:
			e.up.release()
			t.Fatalf("%s, 4 at once: a second call reached the API; want one run and three 429", first.name)
		case <-timer.C:
			t.Fatalf("%s, 4 at once: no answer", first.name)
		}
	}
	for _, c := range creds[1:] {
		r := e.do(t.Context(), "POST", semanticMatch, oneRow, append(credHeaders(c), extra...)...)
		if r.StatusCode != http.StatusTooManyRequests || r.Header.Get(ocl.Tier) != "preview" {
			t.Errorf("%s: %d, tier %q; want 429 of (anonymous), preview", c.name, r.StatusCode, r.Header.Get(ocl.Tier))
		}
	}
	e.up.release()
	if r := recv(t, done); r.StatusCode != http.StatusOK {
		t.Errorf("%s: the call that ran: %d; want 200", first.name, r.StatusCode)
	}
	if p, n := e.up.peak(), len(e.up.requests()); p != 1 || n != 1 {
		t.Errorf("the API ran %d calls, %d at once; want 1", n, p)
	}
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow, extra...); r.StatusCode != http.StatusOK || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("no credential: %d %v; want 200, untouched", r.StatusCode, capacityHeaders(r.Header))
	}
	for _, l := range e.sink.Wait(t, 3+len(creds), waitLimit) {
		if l["user_id"] != identity.AnonymousUser || l["tier"] != "preview" {
			t.Errorf("line of user %v, tier %v; want (anonymous), preview", l["user_id"], l["tier"])
		}
	}
}

// Why: with --identity jwt, a token capgate rejects (expired 45 s ago,
// signed by a key the JWKS file doesn't have yet, for another audience) was
// forwarded with no decision, no count and no lane, and many APIs accept
// such tokens: a limit-1 user ran 4 calls at once. The tokens and header
// identities already gated such callers as (anonymous); now every resolver
// does, by one rule in the middleware.
func TestOneIdentityRuleForEveryResolver(t *testing.T) {
	t.Run("jwt", func(t *testing.T) {
		f := newJWTFixture(t)
		jwt := func(c *capgatehttp.GatewayConfig) { c.Identify = f.ids }
		creds := f.unverifiable(t)
		// The attack run's three, each 4 at once.
		for i := range 3 {
			checkGatedAsAnonymous(t, ruleEnv(t, policy.OCL(), settings.ModeEnforce, jwt), creds[i:i+1])
		}
		checkGatedAsAnonymous(t, ruleEnv(t, policy.OCL(), settings.ModeEnforce, jwt), creds)
		// A good token is its user.
		e := ruleEnv(t, policy.OCL(), settings.ModeEnforce, jwt)
		good := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Bearer "+f.sign(t, f.key, "k1", f.claims("cora", nil)))
		if good.StatusCode != http.StatusOK || good.Header.Get(ocl.Decision) != "admitted" {
			t.Errorf("a good token: %d %q; want admitted", good.StatusCode, good.Header.Get(ocl.Decision))
		}
		if l := e.sink.Wait(t, 1, waitLimit)[0]; l["user_id"] != "cora" {
			t.Errorf("a good token's line of %v; want cora", l["user_id"])
		}
	})
	t.Run("tokens", func(t *testing.T) {
		checkGatedAsAnonymous(t, ruleEnv(t, policy.OCL(), settings.ModeEnforce, nil), []cred{
			{"a token not in the file", "Token t-nobody"},
			{"three parts", "Token t-pam x"},
			{"a Bearer JWT", "Bearer a.b.c"},
			{"a session cookie", ""},
		})
	})
	t.Run("header", func(t *testing.T) {
		ids, err := identity.NewHeader([]string{"10.0.0.0/8"}) // not the test's loopback
		if err != nil {
			t.Fatal(err)
		}
		e := ruleEnv(t, policy.OCL(), settings.ModeEnforce, func(c *capgatehttp.GatewayConfig) { c.Identify = ids })
		checkGatedAsAnonymous(t, e, []cred{
			{"an untrusted peer's X-Capgate-User with a token", "Token t-pam"},
			{"with a session cookie", ""},
		}, "X-Capgate-User", "stan", "X-Capgate-Staff", "true")
	})
	t.Run("upstream", func(t *testing.T) {
		e := ruleEnv(t, policy.OCL(), settings.ModeEnforce, func(c *capgatehttp.GatewayConfig) {
			id, err := identity.NewUpstream(c.Upstream.String())
			if err != nil {
				t.Fatal(err)
			}
			c.Identify = id
		})
		// /user/ answers 401 for each: cached briefly, and gated.
		checkGatedAsAnonymous(t, e, []cred{
			{"a token the API refuses", "Token t-nobody"},
			{"a session the API refuses", ""},
		})
		if n := e.up.lookupsOf("Token t-nobody"); n != 1 {
			t.Errorf("%d lookups of the refused token; want 1 (the 401 is cached)", n)
		}
	})
}

// Where the policy says identity.unverified: refuse, a heavy call with a
// credential capgate can't verify is answered 401 in enforce (the
// policy's scheme as the challenge, never sent to the API, no lane); in
// shadow it is gated as (anonymous), as capgate changes no answer there. A
// light call with it, and a heavy call with no credential, pass.
func TestUnverifiedRefusedWhereThePolicySays(t *testing.T) {
	text := strings.Replace(string(policy.OCL().Source()), "  default_tier: preview\n", "  default_tier: preview\n  unverified: refuse\n", 1)
	p, err := policy.Parse("refuse.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Identity.RefuseUnverified {
		t.Fatal("unverified: refuse not read")
	}
	f := newJWTFixture(t)
	jwt := func(c *capgatehttp.GatewayConfig) { c.Identify = f.ids }
	e := ruleEnv(t, p, settings.ModeEnforce, jwt)
	for _, c := range f.unverifiable(t) {
		r := e.do(t.Context(), "POST", semanticMatch, oneRow, credHeaders(c)...)
		if r.StatusCode != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") != "Token" ||
			!strings.Contains(string(r.Body), "could not be verified") || len(capacityHeaders(r.Header)) != 0 {
			t.Errorf("%s: %d %q %s %v; want 401, WWW-Authenticate Token, no capacity headers", c.name, r.StatusCode,
				r.Header.Get("WWW-Authenticate"), r.Body, capacityHeaders(r.Header))
		}
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("the API got %d requests; want none", n)
	}
	if m := e.inFlight(); len(m) != 0 {
		t.Errorf("leases held: %v", m)
	}
	if r := e.do(t.Context(), "POST", "/concepts/$match/", oneRow, "Authorization", "Bearer expired"); r.StatusCode != http.StatusOK {
		t.Errorf("a light call with an unverifiable token: %d; want 200 (the API answers)", r.StatusCode)
	}
	if r := e.do(t.Context(), "POST", semanticMatch, oneRow); r.StatusCode != http.StatusOK || len(capacityHeaders(r.Header)) != 0 {
		t.Errorf("no credential: %d %v; want 200 untouched", r.StatusCode, capacityHeaders(r.Header))
	}
	good := e.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Bearer "+f.sign(t, f.key, "k1", f.claims("cora", nil)))
	if good.StatusCode != http.StatusOK || good.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("a good token: %d %q; want admitted", good.StatusCode, good.Header.Get(ocl.Decision))
	}

	shadow := ruleEnv(t, p, settings.ModeShadow, jwt)
	r := shadow.do(t.Context(), "POST", semanticMatch, oneRow, "Authorization", "Bearer not.a.jwt")
	if r.StatusCode != http.StatusOK || r.Header.Get(ocl.Decision) != "admitted" {
		t.Errorf("shadow: %d %q; want 200, gated (admitted)", r.StatusCode, r.Header.Get(ocl.Decision))
	}
	if l := shadow.sink.Wait(t, 1, waitLimit)[0]; l["user_id"] != identity.AnonymousUser {
		t.Errorf("shadow line of %v; want (anonymous)", l["user_id"])
	}
}
