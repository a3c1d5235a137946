package bypass

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/test/internal/e2e"
)

// The JWT path: a fourth gateway, --identity jwt over a JWKS file of one
// RSA key, under the OCL policy with the jwt resolver, in front of the same
// upstream, which reads Bearer JWTs leniently (oclsim.auth: the payload's
// sub, nothing checked). A token capgate can't verify is gated as
// "(anonymous)" (preview, paused in the rig): none of them may run.

// gwJWT is the JWT gateway's id.
const gwJWT gatewayID = "jwt"

// The jwt resolver's issuer and audience in the rig's policy.
const (
	jwtIssuer   = "https://auth.bypass.test"
	jwtAudience = "ocl-api"
)

// jwtKit mints the rig's tokens: with the key of the JWKS file (kid k1),
// or the key the IdP rotated to that the file lacks (kid k2).
type jwtKit struct {
	key, rotated *rsa.PrivateKey
	attacker     *ecdsa.PrivateKey // a key of the attacker's own (embedded jwk)
}

var (
	jwtOnce sync.Once
	jwtGW   *gateway
	jwtKeys *jwtKit
	jwtErr  error
)

// jwtGateway starts (once) the JWT gateway and returns it and its keys.
func (r *rig) jwtGateway(t *testing.T) (*gateway, *jwtKit) {
	t.Helper()
	jwtOnce.Do(func() { jwtGW, jwtKeys, jwtErr = r.startJWTGateway(t) })
	if jwtErr != nil {
		t.Fatal(jwtErr)
	}
	return jwtGW, jwtKeys
}

func (r *rig) startJWTGateway(t *testing.T) (*gateway, *jwtKit, error) {
	k := &jwtKit{}
	var err error
	if k.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, nil, err
	}
	if k.rotated, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, nil, err
	}
	if k.attacker, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, nil, err
	}
	pub := jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: "k1", Use: "sig"}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{pub}})
	if err != nil {
		return nil, nil, err
	}
	jwks := filepath.Join(r.dir, "jwks.json")
	if err := os.WriteFile(jwks, set, 0o600); err != nil {
		return nil, nil, err
	}
	// The OCL policy with the jwt resolver: its tiers, names and key prefix.
	ocl := string(policy.OCL().Source())
	start, end := strings.Index(ocl, "\nidentity:"), strings.Index(ocl, "\nlanes:")
	if start < 0 || end < start {
		return nil, nil, fmt.Errorf("the OCL policy has no identity block before its lanes")
	}
	pol := ocl[:start] + `
identity:
  resolver: jwt
  scheme: Bearer
  jwt:
    issuer: ` + jwtIssuer + `
    audience: ` + jwtAudience + `
    staff_claim: is_staff
  tiers:
    - {tier: staff, staff: true}
    - {tier: core, groups: [core_user]}
    - {tier: early_access, groups: [early_access]}
  default_tier: preview
` + ocl[end:]
	polFile := filepath.Join(r.dir, "jwt-policy.yaml")
	if err := os.WriteFile(polFile, []byte(pol), 0o600); err != nil {
		return nil, nil, err
	}
	g, err := r.startGateway(t.Context(), gwJWT, configArgs, "--max-body-bytes", fmt.Sprint(maxBodyBytes), "--drain-delay", "0",
		"--policy", polFile, "--identity", "jwt", "--jwks", jwks)
	return g, k, err
}

// claims returns the claims of a good token of user, changed by edit.
func (k *jwtKit) claims(user string, edit func(map[string]any)) map[string]any {
	now := time.Now()
	var groups []string
	if user == "cora" {
		groups = []string{"core_user"}
	}
	c := map[string]any{"iss": jwtIssuer, "aud": jwtAudience, "sub": user, "groups": groups, "is_staff": staffUser[user],
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(c)
	}
	return c
}

// sign returns claims signed RS256 by priv, the header naming kid ("": none).
func (k *jwtKit) sign(t testing.TB, priv *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	key := jose.SigningKey{Algorithm: jose.RS256, Key: priv}
	if kid != "" {
		key.Key = jose.JSONWebKey{Key: priv, KeyID: kid}
	}
	return compact(t, key, nil, claims)
}

// compact returns claims signed with key (and opts), compact serialized.
func compact(t testing.TB, key jose.SigningKey, opts *jose.SignerOptions, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// segment is the base64url of v's JSON.
func segment(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// badToken is a token of user that capgate's jwt resolver refuses, by name.
type badToken struct{ name, token string }

// unverifiable returns tokens of user the gateway can't verify: the attack
// run's three (expired 45 s ago, past the 30 s leeway; signed by the key
// the IdP rotated to, which the JWKS file lacks yet; minted for another
// audience), then the ones the resolver always refused. The upstream runs
// every one of them.
func (k *jwtKit) unverifiable(t testing.TB, user string) []badToken {
	t.Helper()
	good := func(edit func(map[string]any)) string { return k.sign(t, k.key, "k1", k.claims(user, edit)) }
	// HS256 keyed with the RSA public key, the classic confusion.
	der, err := x509.MarshalPKIXPublicKey(&k.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	hsInput := segment(map[string]string{"alg": "HS256", "kid": "k1", "typ": "JWT"}) + "." + segment(k.claims(user, nil))
	mac := hmac.New(sha256.New, der)
	mac.Write([]byte(hsInput))
	// A token signed by the attacker's key, carrying that key in its header.
	embedded := compact(t, jose.SigningKey{Algorithm: jose.ES256, Key: k.attacker},
		(&jose.SignerOptions{EmbedJWK: true}).WithHeader("kid", "k1"), k.claims(user, nil))
	goodTok := good(nil)
	parts := strings.Split(goodTok, ".")
	return []badToken{
		{"expired 45 s ago", good(func(c map[string]any) { c["exp"] = time.Now().Add(-45 * time.Second).Unix() })},
		{"signed by the rotated key", k.sign(t, k.rotated, "k2", k.claims(user, nil))},
		{"for another audience", good(func(c map[string]any) { c["aud"] = "another-api" })},
		{"the rotated key under k1's kid", k.sign(t, k.rotated, "k1", k.claims(user, nil))},
		{"of another issuer", good(func(c map[string]any) { c["iss"] = "https://idp.evil.test" })},
		{"without exp", good(func(c map[string]any) { delete(c, "exp") })},
		{"issued in the future", good(func(c map[string]any) { c["iat"] = time.Now().Add(time.Hour).Unix() })},
		{"not valid yet", good(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })},
		{"alg none", segment(map[string]string{"alg": "none", "kid": "k1"}) + "." + segment(k.claims(user, nil)) + "."},
		{"HS256 keyed with the RSA key", hsInput + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))},
		{"an embedded jwk", embedded},
		{"an unknown kid", k.sign(t, k.key, "k9", k.claims(user, nil))},
		{"the payload changed under the signature", parts[0] + "." + segment(k.claims(user, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })) + "." + parts[2]},
		{"sub an array", good(func(c map[string]any) { c["sub"] = []string{user} })},
		{"groups a number", good(func(c map[string]any) { c["groups"] = 7 })},
		{"over 8 KiB", good(func(c map[string]any) { c["pad"] = strings.Repeat("x", 9<<10) })},
	}
}

// TestJWTAttacks: every token of pam (preview, paused) the gateway can't
// verify is gated as (anonymous) and refused, and the upstream, which would
// run them all, runs none; her good token is refused as herself. cora
// (limit 1) sends 4 calls at once with each of the attack run's three
// tokens (it ran all 4): refused; with a good token, one runs at a time.
func TestJWTAttacks(t *testing.T) {
	r := suite.Get(t)
	g, k := r.jwtGateway(t)
	mark := r.mark(t)
	send := func(token string, extra ...string) []int {
		q := e2e.Request{Target: match, Body: oneRow, Headers: append([]string{"Authorization: Bearer " + token, jsonCT}, extra...)}
		return e2e.Statuses(t, g.addr, q.Raw(), 1)
	}
	if got := send(k.sign(t, k.key, "k1", k.claims("pam", nil))); !slices.Equal(got, []int{refused}) {
		t.Errorf("pam's good token: %v, want [429]", got)
	}
	for _, bt := range k.unverifiable(t, "pam") {
		if got := send(bt.token, "X-Test-Case: jwt "+bt.name); !slices.Equal(got, []int{refused}) {
			t.Errorf("pam's token %s: %v, want [429] (gated as (anonymous), paused)", bt.name, got)
		}
	}
	// The attack run's three, cora 4 at once, each held 1 s if it ran.
	for _, bt := range k.unverifiable(t, "cora")[:3] {
		statuses := make([]int, 4)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Go(func() {
				if s := send(bt.token, "X-Test-Hold-Ms: 1000", "X-Test-Case: jwt cora "+bt.name); len(s) == 1 {
					statuses[i] = s[0]
				}
			})
		}
		wg.Wait()
		if slices.ContainsFunc(statuses, func(s int) bool { return s != refused }) {
			t.Errorf("cora's token %s, 4 at once: %v; want every one refused", bt.name, statuses)
		}
	}
	statuses := make([]int, 6)
	var wg sync.WaitGroup
	good := k.sign(t, k.key, "k1", k.claims("cora", nil))
	for i := range statuses {
		wg.Go(func() {
			if s := send(good, "X-Test-Hold-Ms: 500", "X-Test-Case: jwt cora good"); len(s) == 1 {
				statuses[i] = s[0]
			}
		})
	}
	wg.Wait()
	if !slices.Contains(statuses, 200) {
		t.Errorf("cora's good token, 6 at once: %v; want some run", statuses)
	}
	// A forged staff claim never makes a caller staff.
	if got := send(k.sign(t, k.rotated, "k1", k.claims("pam", func(c map[string]any) { c["is_staff"] = true }))); !slices.Equal(got, []int{refused}) {
		t.Errorf("pam's forged staff token: %v, want [429]", got)
	}
	r.checkInvariants(t, mark)
}

// jwtPool returns, per user of the fuzzer (pam, cora), a good token first,
// then every token of unverifiable.
func (k *jwtKit) pool(t testing.TB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, user := range []string{"pam", "cora"} {
		out[user] = append(out[user], k.sign(t, k.key, "k1", k.claims(user, nil)))
		for _, bt := range k.unverifiable(t, user) {
			out[user] = append(out[user], bt.token)
		}
	}
	return out
}

// jwtCredentials are user's JWT, mutated: mostly one the gateway can't
// verify, its spelling changed now and then (scheme case, whitespace, a
// byte of the signature, a second Authorization line), sometimes with the
// user's session too (the upstream's next authenticator).
func (m *mutator) jwtCredentials(user string) []string {
	pool := m.jwt[user]
	tok := pool[0]
	if m.chance(0.6) {
		tok = pool[1+m.rnd.IntN(len(pool)-1)]
	}
	switch m.rnd.IntN(10) {
	case 0:
		// A byte of the signature changed (the upstream checks none).
		if i := strings.LastIndexByte(tok, '.'); i >= 0 && i+1 < len(tok) {
			b := []byte(tok)
			b[i+1+m.rnd.IntN(len(tok)-i-1)] ^= 1
			tok = string(b)
		}
	case 1:
		tok += m.pick(" ", "\t", ",", " x", ".")
	case 2:
		tok = strings.Replace(tok, ".", m.pick("..", ". ", ""), 1)
	}
	scheme := m.pick("Bearer ", "Bearer ", "Bearer ", "bearer ", "BEARER ", "Bearer\t", "Bearer  ", "Token ")
	name := m.pick("Authorization", "authorization", "AUTHORIZATION")
	var h []string
	if m.chance(0.1) {
		h = append(h, name+": "+m.pick("", " ", "Bearer", "Token nope", "Basic eDp5"))
	}
	h = append(h, name+": "+scheme+tok)
	if m.chance(0.1) {
		h = append(h, name+": "+m.pick("", "Bearer "+pool[0]))
	}
	if m.chance(0.2) {
		h = append(h, "Cookie: sessionid="+m.r.creds.Sessions[user]+"; csrftoken="+m.r.creds.CSRF, "X-CSRFToken: "+m.r.creds.CSRF)
	}
	return h
}
