package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/capgate/capgate/tools/simapi"
)

// The jwt identity of the test policy: tokens of this issuer for this
// audience, the groups in the claim "roles".
const (
	testIssuer   = "https://auth.example.com"
	testAudience = "capgate"
)

// jwtPolicy returns the inference example with the jwt resolver: Bearer
// tokens of testIssuer for testAudience, tier pro for the group "pro" of
// the claim "roles", else free.
func jwtPolicy(t *testing.T) string {
	t.Helper()
	text := readInferencePolicy(t)
	start, end := strings.Index(text, "\nidentity:"), strings.Index(text, "\nlanes:")
	if start < 0 || end < start {
		t.Fatal("the inference policy has no identity block before its lanes")
	}
	return text[:start] + `
identity:
  resolver: jwt
  scheme: Bearer
  jwt:
    issuer: ` + testIssuer + `
    audience: ` + testAudience + `
    groups_claim: roles
  tiers:
    - {tier: pro, groups: [pro]}
  default_tier: free
` + text[end:]
}

// ecKey returns a new P-256 key.
func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeKeySet writes the public keys of privs, each named by its kid, as
// a JWKS file at path.
func writeKeySet(t *testing.T, path string, kids []string, privs ...*ecdsa.PrivateKey) {
	t.Helper()
	var set jose.JSONWebKeySet
	for i, p := range privs {
		k := jose.JSONWebKey{Key: p, KeyID: kids[i], Algorithm: string(jose.ES256), Use: "sig"}
		set.Keys = append(set.Keys, k.Public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

// signToken returns a compact JWT of claims signed with ES256 by priv,
// its header naming kid.
func signToken(t *testing.T, priv *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
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

// tokenClaims returns the claims of a token of user sub, in the groups
// roles, valid from a minute ago for an hour past now shifted by age (a
// negative age: expired).
func tokenClaims(sub string, roles []string, age time.Duration) map[string]any {
	now := time.Now().Add(-age)
	return map[string]any{"iss": testIssuer, "aud": []string{testAudience}, "sub": sub, "roles": roles,
		"iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
}

// TestServeJWTIdentity: serve --identity jwt --jwks FILE under a policy of
// the jwt resolver. A valid token's user and tier (from its groups claim)
// are the call's; an expired or wrongly signed token is a credential
// capgate can't verify, so its call is gated as "(anonymous)" of the
// default tier (never passed ungated: the API may accept it), and a call
// with no credential passes untouched; after the key set is rotated and
// reloaded (SIGHUP), the new key's tokens are believed and the old key's
// are not.
func TestServeJWTIdentity(t *testing.T) {
	clearLaneEnv(t)
	dir := t.TempDir()
	polFile := filepath.Join(dir, "policy.yaml")
	writeFile(t, polFile, jwtPolicy(t))
	jwks := filepath.Join(dir, "jwks.json")
	k1, k2, forger := ecKey(t), ecKey(t), ecKey(t)
	writeKeySet(t, jwks, []string{"k1"}, k1)
	api := &simapi.Inference{Latency: time.Millisecond}
	srv, addr, stderr := startServer(t, api, "--policy", polFile, "--identity", "jwt", "--jwks", jwks)

	// call sends a chat call with token and returns its answer.
	call := func(token string) answer {
		t.Helper()
		a := callAPI(t, addr, http.MethodPost, "/v1/chat/completions", token, "small")
		if a.code != http.StatusOK {
			t.Fatalf("chat with a token: %d %q; want the API's 200", a.code, a.body)
		}
		return a
	}
	gated := func(what, token, tier string) {
		t.Helper()
		a := call(token)
		if a.header.Get("Capgate-Decision") != "admitted" || a.header.Get("Capgate-Tier") != tier {
			t.Errorf("%s: headers %v; want the call gated, Capgate-Tier %s", what, a.header, tier)
		}
	}
	anonymous := func(what, token string) {
		t.Helper()
		gated(what+" (as anonymous)", token, "free")
	}
	before := api.Stats().Calls
	if a := call(""); len(capacityHeaders(a.header)) > 0 || api.Stats().Calls != before+1 {
		t.Errorf("no credential: capacity headers %v; want the call untouched, served", capacityHeaders(a.header))
	}

	gated("a pro's token", signToken(t, k1, "k1", tokenClaims("u-pro", []string{"staff", "pro"}, 0)), "pro")
	gated("a token without the pro group", signToken(t, k1, "k1", tokenClaims("u-free", []string{"staff"}, 0)), "free")
	anonymous("an expired token", signToken(t, k1, "k1", tokenClaims("u-late", []string{"pro"}, 3*time.Hour)))
	anonymous("a token signed by another key under k1's kid", signToken(t, forger, "k1", tokenClaims("u-forged", []string{"pro"}, 0)))
	anonymous("a token of another issuer", signToken(t, k1, "k1", func() map[string]any {
		c := tokenClaims("u-other", []string{"pro"}, 0)
		c["iss"] = "https://elsewhere.example.com"
		return c
	}()))
	next := signToken(t, k2, "k2", tokenClaims("u-next", []string{"pro"}, 0))
	anonymous("a token of a key not in the set yet", next)

	// The key set is rotated: k2 in, k1 out. SIGHUP reloads it.
	writeKeySet(t, jwks, []string{"k2"}, k2)
	if err := srv.Reload(); err != nil {
		t.Fatalf("Reload after the rotation: %v", err)
	}
	if !strings.Contains(stderr.String(), `msg="reloaded the JWKS" keys=1`) {
		t.Errorf("no reloaded the JWKS line:\n%s", stderr)
	}
	gated("the new key's token", next, "pro")
	anonymous("the old key's token", signToken(t, k1, "k1", tokenClaims("u-pro", []string{"pro"}, 0)))

	// A broken key set keeps the keys in force.
	writeFile(t, jwks, "not json")
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), "reload the JWKS") {
		t.Errorf("Reload with a broken key set: %v; want its error", err)
	}
	gated("the new key's token after a broken key set", next, "pro")

	// The log lines of the gated calls name each token's user and tier,
	// (anonymous) for the five unverifiable ones.
	until(t, 10*time.Second, "the nine gated calls' log lines", func() bool { return len(logLines(t, srv.Options().LogFile)) == 9 })
	var users []string
	for _, l := range logLines(t, srv.Options().LogFile) {
		users = append(users, l["user_id"].(string)+":"+l["tier"].(string))
	}
	slices.Sort(users)
	want := strings.Repeat("(anonymous):free ", 5) + "u-free:free u-next:pro u-next:pro u-pro:pro"
	if strings.Join(users, " ") != want {
		t.Errorf("the log lines' users %q; want %s", users, want)
	}
}
