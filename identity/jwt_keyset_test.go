package identity_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/capgate/capgate/identity"
)

// TestJWTKeyAlgAndUse checks a key's own "alg" and "use".
func TestJWTKeyAlgAndUse(t *testing.T) {
	k := jwtKeys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	rs512 := pubJWK(k.rsa1, "rsa1")
	rs512.Algorithm = "RS512"
	enc := pubJWK(k.ec1, "ec1")
	enc.Use = "enc"
	writeJWKS(t, path, rs512, enc)
	j := mustJWT(t, path, nil)
	if got := j.KeyCount(); got != 1 {
		t.Errorf("KeyCount: got %d, want 1 (the enc key is skipped)", got)
	}
	for _, tc := range []struct {
		alg  jose.SignatureAlgorithm
		priv any
		kid  string
		want bool
	}{
		{jose.RS512, k.rsa1, "rsa1", true},
		{jose.RS256, k.rsa1, "rsa1", false},
		{jose.ES256, k.ec1, "ec1", false},
		{jose.ES256, k.ec1, "", false},
	} {
		if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, tc.alg, tc.priv, tc.kid, claims(), nil)); ok != tc.want {
			t.Errorf("%s kid %q: identified %v, want %v", tc.alg, tc.kid, ok, tc.want)
		}
	}
}

func TestJWTReload(t *testing.T) {
	k := jwtKeys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, pubJWK(k.rsa1, "2025-01"))
	j := mustJWT(t, path, nil)
	old := "Bearer " + signJWT(t, jose.RS256, k.rsa1, "2025-01", claims(), nil)
	rotated := "Bearer " + signJWT(t, jose.RS256, k.rsa2, "2025-02", claims(), nil)
	check := func(when string, wantOld, wantRotated bool) {
		t.Helper()
		if _, ok := identifyAuth(t, j, old); ok != wantOld {
			t.Errorf("%s: old key's token identified %v, want %v", when, ok, wantOld)
		}
		if _, ok := identifyAuth(t, j, rotated); ok != wantRotated {
			t.Errorf("%s: new key's token identified %v, want %v", when, ok, wantRotated)
		}
	}
	check("before rotation", true, false)

	writeJWKS(t, path, pubJWK(k.rsa2, "2025-02"))
	check("rotated, not reloaded", true, false)
	if err := j.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check("reloaded", false, true)

	for _, tc := range []struct {
		name  string
		write func()
	}{
		{"file deleted", func() { os.Remove(path) }},
		{"garbage", func() { os.WriteFile(path, []byte("-----BEGIN PUBLIC KEY-----"), 0o600) }},
		{"empty key set", func() { os.WriteFile(path, []byte(`{"keys":[]}`), 0o600) }},
		{"private key", func() { writeJWKS(t, path, jose.JSONWebKey{Key: k.rsa1, KeyID: "2025-01"}) }},
	} {
		tc.write()
		err := j.Reload()
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Reload with %s: error %v, want one naming %s", tc.name, err, path)
		}
		check("after a failed reload ("+tc.name+")", false, true)
		if got := j.KeyCount(); got != 1 {
			t.Errorf("after a failed reload (%s): KeyCount %d, want 1", tc.name, got)
		}
	}
}

// TestJWTReloadConcurrent runs Identify while the keys are reloaded (for
// -race): a token is believed exactly when its key is in force.
func TestJWTReloadConcurrent(t *testing.T) {
	k := jwtKeys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, pubJWK(k.ec1, "a"), pubJWK(k.ed1, "b"))
	j := mustJWT(t, path, nil)
	always := "Bearer " + signJWT(t, jose.ES256, k.ec1, "a", claims(), nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			r := httptest.NewRequest("GET", "/api/heavy/", nil)
			r.Header.Set("Authorization", always)
			for range 200 {
				if _, ok, err := j.Identify(r.Context(), r); !ok || err != nil {
					t.Errorf("a token of a key always in force: %v, %v; want alice", ok, err)
					return
				}
			}
		})
	}
	for i := range 50 {
		if i%2 == 0 {
			writeJWKS(t, path, pubJWK(k.ec1, "a"))
		} else {
			writeJWKS(t, path, pubJWK(k.ec1, "a"), pubJWK(k.ed1, "b"))
		}
		if err := j.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestNewJWTErrors(t *testing.T) {
	k := jwtKeys()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := stdJWKS(t)
	keysFile := func(name string, keys ...jose.JSONWebKey) string {
		p := filepath.Join(dir, name)
		writeJWKS(t, p, keys...)
		return p
	}
	encOnly := pubJWK(k.ec1, "ec1")
	encOnly.Use = "enc"
	ps512Only := pubJWK(k.rsa1, "rsa1")
	ps512Only.Algorithm = "PS512"
	for _, tc := range []struct {
		name string
		mod  func(*identity.JWTOptions)
		want string // in the error
	}{
		{"no file", func(o *identity.JWTOptions) { o.JWKSFile = "" }, "JWKS file is required"},
		{"no issuer", func(o *identity.JWTOptions) { o.Issuer = "" }, "issuer is required"},
		{"no audience", func(o *identity.JWTOptions) { o.Audience = "" }, "audience is required"},
		{"negative leeway", func(o *identity.JWTOptions) { o.Leeway = -time.Second }, "negative"},
		{"alg none", func(o *identity.JWTOptions) { o.Algorithms = []string{"RS256", "none"} }, `"none" is never accepted`},
		{"alg HS256", func(o *identity.JWTOptions) { o.Algorithms = []string{"HS256"} }, `"HS256" is never accepted`},
		{"alg unknown", func(o *identity.JWTOptions) { o.Algorithms = []string{"rs256"} }, `unknown algorithm "rs256"`},
		{"file missing", func(o *identity.JWTOptions) { o.JWKSFile = filepath.Join(dir, "missing.json") }, "missing.json"},
		{"garbage", func(o *identity.JWTOptions) { o.JWKSFile = file("garbage.json", "not json") }, "garbage.json: not a JSON Web Key Set"},
		{"an array", func(o *identity.JWTOptions) { o.JWKSFile = file("array.json", `[]`) }, "array.json: not a JSON Web Key Set"},
		{"a single JWK", func(o *identity.JWTOptions) {
			o.JWKSFile = file("jwk.json", string(mustJSON(t, pubJWK(k.ec1, "ec1"))))
		}, `jwk.json: not a JSON Web Key Set: no "keys"`},
		{"data after", func(o *identity.JWTOptions) { o.JWKSFile = file("after.json", `{"keys":[]} {}`) }, "after.json: not a JSON Web Key Set"},
		{"empty key set", func(o *identity.JWTOptions) { o.JWKSFile = file("empty.json", `{"keys":[]}`) }, "empty.json: no usable public key"},
		{"only an enc key", func(o *identity.JWTOptions) { o.JWKSFile = keysFile("enc.json", encOnly) }, "enc.json: no usable public key"},
		{"only a key for an alg not allowed", func(o *identity.JWTOptions) { o.JWKSFile = keysFile("ps512.json", ps512Only) }, "ps512.json: no usable public key"},
		{"only keys for algs not allowed", func(o *identity.JWTOptions) { o.JWKSFile = good; o.Algorithms = []string{"ES512"} }, "jwks.json: no usable public key"},
		{"a bad key", func(o *identity.JWTOptions) {
			o.JWKSFile = file("badkey.json", `{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`)
		}, "badkey.json: key 0"},
		{"RSA private key", func(o *identity.JWTOptions) {
			o.JWKSFile = keysFile("rsapriv.json", pubJWK(k.ec1, "ec1"), jose.JSONWebKey{Key: k.rsa1, KeyID: "r"})
		}, `rsapriv.json: key 1 (kid "r") is a private key`},
		{"EC private key", func(o *identity.JWTOptions) { o.JWKSFile = keysFile("ecpriv.json", jose.JSONWebKey{Key: k.ec1}) }, "ecpriv.json: key 0"},
		{"Ed25519 private key", func(o *identity.JWTOptions) { o.JWKSFile = keysFile("edpriv.json", jose.JSONWebKey{Key: k.ed1}) }, "edpriv.json: key 0"},
		{"private key of a type skipped", func(o *identity.JWTOptions) {
			o.JWKSFile = file("x25519.json", `{"keys":[{"kty":"OKP","crv":"X25519","x":"AA","d":"AA"}]}`)
		}, "x25519.json: key 0"},
		{"symmetric key", func(o *identity.JWTOptions) {
			o.JWKSFile = keysFile("oct.json", pubJWK(k.ec1, "ec1"), jose.JSONWebKey{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "h"})
		}, `oct.json: key 1 (kid "h") is a symmetric key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := identity.JWTOptions{JWKSFile: good, Issuer: jwtIssuer, Audience: jwtAudience}
			tc.mod(&o)
			j, err := identity.NewJWT(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewJWT: %v, %v; want an error with %q", j, err, tc.want)
			}
			if strings.Contains(tc.name, "private") && !strings.Contains(err.Error(), "private key") {
				t.Errorf("error %q does not say it is a private key", err)
			}
		})
	}
}

// TestNewJWTSkipsUnknownKeys checks that keys go-jose can't use are
// skipped, as RFC 7517 §5 says, and not counted.
func TestNewJWTSkipsUnknownKeys(t *testing.T) {
	k := jwtKeys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	ec := mustJSON(t, pubJWK(k.ec1, "ec1"))
	body := `{"keys":[{"kty":"OKP","crv":"X25519","x":"3p7bfXt9wbTTW2HC7OQ1Nz-DQ8hbeGdNrfx-FG-IK08"},{"kty":"XYZ","kid":"q"},` + string(ec) + `],"other":1}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	j := mustJWT(t, path, nil)
	if got := j.KeyCount(); got != 1 {
		t.Errorf("KeyCount: got %d, want 1", got)
	}
	if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, jose.ES256, k.ec1, "", claims(), nil)); !ok {
		t.Error("ES256 token: anonymous, want alice")
	}
}
