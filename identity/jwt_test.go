package identity_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/capgate/capgate/identity"
)

// jwtNow is the fixed clock of the JWT tests.
var jwtNow = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

const (
	jwtIssuer   = "https://auth.example.com"
	jwtAudience = "capgate"
)

// jwtTestKeys are the private keys of the JWT tests, made once: RSA
// generation is slow under -race.
type jwtTestKeys struct {
	rsa1, rsa2 *rsa.PrivateKey
	ec1, ec2   *ecdsa.PrivateKey
	ed1, ed2   ed25519.PrivateKey
}

var jwtKeys = sync.OnceValue(func() jwtTestKeys {
	var k jwtTestKeys
	var err error
	must := func(e error) {
		if e != nil {
			panic(e)
		}
	}
	k.rsa1, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	k.ec1, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	k.ec2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	_, k.ed1, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	_, k.ed2, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	return k
})

// pubJWK returns the public JWK of the private key priv.
func pubJWK(priv any, kid string) jose.JSONWebKey {
	k := jose.JSONWebKey{Key: priv, KeyID: kid}
	return k.Public()
}

// writeJWKS writes keys as a JWKS file at path.
func writeJWKS(tb testing.TB, path string, keys ...jose.JSONWebKey) {
	tb.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// stdJWKS writes the usual key set (rsa1, ec1 and ed1, with kids) to a
// new file and returns its path.
func stdJWKS(tb testing.TB) string {
	tb.Helper()
	k := jwtKeys()
	path := filepath.Join(tb.TempDir(), "jwks.json")
	writeJWKS(tb, path, pubJWK(k.rsa1, "rsa1"), pubJWK(k.ec1, "ec1"), pubJWK(k.ed1, "ed1"))
	return path
}

// mustJWT returns a JWT on the JWKS file path at jwtNow, its options
// changed by mod (if not nil).
func mustJWT(tb testing.TB, path string, mod func(*identity.JWTOptions)) *identity.JWT {
	tb.Helper()
	o := identity.JWTOptions{
		JWKSFile:   path,
		Issuer:     jwtIssuer,
		Audience:   jwtAudience,
		StaffClaim: "is_staff",
		Now:        func() time.Time { return jwtNow },
	}
	if mod != nil {
		mod(&o)
	}
	j, err := identity.NewJWT(o)
	if err != nil {
		tb.Fatal(err)
	}
	return j
}

// claims returns a valid token's claims, changed by the pairs kv (a nil
// value deletes the claim).
func claims(kv ...any) map[string]any {
	c := map[string]any{
		"iss":      jwtIssuer,
		"aud":      []string{"other", jwtAudience},
		"sub":      "alice",
		"groups":   []string{"core_user", "beta"},
		"is_staff": true,
		"iat":      jwtNow.Add(-time.Minute).Unix(),
		"nbf":      jwtNow.Add(-time.Minute).Unix(),
		"exp":      jwtNow.Add(time.Hour).Unix(),
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// signJWT returns a compact JWS of payload (a []byte as it is, anything
// else as JSON) signed by priv with alg; the header names kid unless it is
// empty.
func signJWT(tb testing.TB, alg jose.SignatureAlgorithm, priv any, kid string, payload any, opts *jose.SignerOptions) string {
	tb.Helper()
	b, ok := payload.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(payload); err != nil {
			tb.Fatal(err)
		}
	}
	key := priv
	if kid != "" {
		key = jose.JSONWebKey{Key: priv, KeyID: kid}
	}
	if opts == nil {
		opts = &jose.SignerOptions{}
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts.WithType("JWT"))
	if err != nil {
		tb.Fatal(err)
	}
	sig, err := s.Sign(b)
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := sig.CompactSerialize()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// unsignedJWT returns a token with the header and payload given and no
// signature.
func unsignedJWT(header string, payload map[string]any) string {
	b, _ := json.Marshal(payload)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc(b) + "."
}

// mustJSON returns v as JSON.
func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// identifyAuth runs j.Identify on a request with the Authorization lines
// given.
func identifyAuth(tb testing.TB, j *identity.JWT, auth ...string) (identity.Caller, bool) {
	tb.Helper()
	r := httptest.NewRequest("GET", "/api/heavy/", nil)
	if auth != nil {
		r.Header["Authorization"] = auth
	}
	c, ok, err := j.Identify(r.Context(), r)
	if err != nil {
		tb.Fatalf("Identify: error %v, want none (a bad token is anonymous)", err)
	}
	if !ok && !reflect.DeepEqual(c, identity.Caller{}) {
		tb.Fatalf("Identify: not ok with caller %+v, want the zero identity.Caller", c)
	}
	return c, ok
}

// alice is the caller claims() names.
var alice = identity.Caller{UserID: "alice", Staff: true, Groups: []string{"core_user", "beta"}}

func TestJWTIdentifyValid(t *testing.T) {
	k := jwtKeys()
	j := mustJWT(t, stdJWKS(t), nil)
	for _, tc := range []struct {
		name string
		alg  jose.SignatureAlgorithm
		priv any
		kid  string
	}{
		{"RS256", jose.RS256, k.rsa1, "rsa1"},
		{"RS512", jose.RS512, k.rsa1, "rsa1"},
		{"PS256", jose.PS256, k.rsa1, "rsa1"},
		{"ES256", jose.ES256, k.ec1, "ec1"},
		{"EdDSA", jose.EdDSA, k.ed1, "ed1"},
		{"RS256 no kid", jose.RS256, k.rsa1, ""},
		{"ES256 no kid", jose.ES256, k.ec1, ""},
		{"EdDSA no kid", jose.EdDSA, k.ed1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := signJWT(t, tc.alg, tc.priv, tc.kid, claims(), nil)
			for _, auth := range []string{"Bearer " + tok, "bearer " + tok, " BEARER\t " + tok + " "} {
				if c, ok := identifyAuth(t, j, auth); !ok || !reflect.DeepEqual(c, alice) {
					t.Errorf("%.12q: got %+v, %v; want %+v, true", auth, c, ok, alice)
				}
			}
		})
	}
	if got := j.KeyCount(); got != 3 {
		t.Errorf("KeyCount: got %d, want 3", got)
	}
}

func TestJWTIdentifyClaims(t *testing.T) {
	k := jwtKeys()
	path := stdJWKS(t)
	j := mustJWT(t, path, nil)
	sec := func(d time.Duration) int64 { return jwtNow.Add(d).Unix() }
	for _, tc := range []struct {
		name   string
		claims map[string]any
		want   identity.Caller
	}{
		{"one group as a string", claims("groups", "core_user"), identity.Caller{UserID: "alice", Staff: true, Groups: []string{"core_user"}}},
		{"no groups claim", claims("groups", nil), identity.Caller{UserID: "alice", Staff: true}},
		{"null groups", claims("groups", json.RawMessage("null")), identity.Caller{UserID: "alice", Staff: true}},
		{"empty groups dropped", claims("groups", []string{"", "a", ""}), identity.Caller{UserID: "alice", Staff: true, Groups: []string{"a"}}},
		{"no staff claim", claims("is_staff", nil), identity.Caller{UserID: "alice", Groups: alice.Groups}},
		{"staff false", claims("is_staff", false), identity.Caller{UserID: "alice", Groups: alice.Groups}},
		{"staff as a string", claims("is_staff", "true"), identity.Caller{UserID: "alice", Groups: alice.Groups}},
		{"staff as a number", claims("is_staff", 1), identity.Caller{UserID: "alice", Groups: alice.Groups}},
		{"aud a string", claims("aud", jwtAudience), alice},
		{"exp within leeway", claims("exp", sec(-29*time.Second)), alice},
		{"nbf within leeway", claims("nbf", sec(29*time.Second)), alice},
		{"iat within leeway", claims("iat", sec(29*time.Second)), alice},
		{"other claims ignored", claims("extra", map[string]any{"a": []int{1}}), alice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := signJWT(t, jose.ES256, k.ec1, "ec1", tc.claims, nil)
			if c, ok := identifyAuth(t, j, "Bearer "+tok); !ok || !reflect.DeepEqual(c, tc.want) {
				t.Errorf("got %+v, %v; want %+v, true", c, ok, tc.want)
			}
		})
	}

	t.Run("claims named by options", func(t *testing.T) {
		j := mustJWT(t, path, func(o *identity.JWTOptions) {
			o.UserClaim, o.GroupsClaim, o.StaffClaim = "preferred_username", "roles", ""
		})
		tok := signJWT(t, jose.ES256, k.ec1, "ec1", claims("sub", "svc-123", "preferred_username", "bob", "roles", []string{"ops"}), nil)
		want := identity.Caller{UserID: "bob", Groups: []string{"ops"}} // is_staff is true, but no staff claim is set
		if c, ok := identifyAuth(t, j, "Bearer "+tok); !ok || !reflect.DeepEqual(c, want) {
			t.Errorf("got %+v, %v; want %+v, true", c, ok, want)
		}
	})

	t.Run("leeway option", func(t *testing.T) {
		j := mustJWT(t, path, func(o *identity.JWTOptions) { o.Leeway = 2 * time.Minute })
		for _, c := range []map[string]any{claims("exp", sec(-time.Minute-59*time.Second)), claims("nbf", sec(119*time.Second))} {
			if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, jose.ES256, k.ec1, "ec1", c, nil)); !ok {
				t.Errorf("%v: anonymous, want alice within a 2 min leeway", c)
			}
		}
		if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, jose.ES256, k.ec1, "ec1", claims("exp", sec(-121*time.Second)), nil)); ok {
			t.Error("expired 121 s ago: identified, want anonymous past a 2 min leeway")
		}
	})
}

// TestJWTIdentifyRejects checks that every bad credential is anonymous.
// Each token is a valid one with one thing wrong.
func TestJWTIdentifyRejects(t *testing.T) {
	k := jwtKeys()
	j := mustJWT(t, stdJWKS(t), nil)
	sec := func(d time.Duration) int64 { return jwtNow.Add(d).Unix() }
	es := func(c any) string { return signJWT(t, jose.ES256, k.ec1, "ec1", c, nil) }
	valid := es(claims())
	if _, ok := identifyAuth(t, j, "Bearer "+valid); !ok {
		t.Fatal("the valid token is anonymous")
	}
	rsaPub, err := x509.MarshalPKIXPublicKey(&k.rsa1.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(mustJSON(t, claims("sub", "mallory"))) + "." + parts[2]

	for _, tc := range []struct {
		name string
		auth []string
	}{
		{"no header", nil},
		{"empty header", []string{""}},
		{"Token scheme", []string{"Token " + valid}},
		{"Basic scheme", []string{"Basic " + valid}},
		{"no scheme", []string{valid}},
		{"Bearer alone", []string{"Bearer"}},
		{"three parts", []string{"Bearer " + valid + " x"}},
		{"two header lines", []string{"Bearer " + valid, "Bearer " + valid}},
		{"not a JWS", []string{"Bearer not.a.jwt"}},
		{"expired", []string{"Bearer " + es(claims("exp", sec(-31*time.Second)))}},
		{"no exp", []string{"Bearer " + es(claims("exp", nil))}},
		{"not yet valid", []string{"Bearer " + es(claims("nbf", sec(31*time.Second)))}},
		{"issued in the future", []string{"Bearer " + es(claims("iat", sec(31*time.Second)))}},
		{"exp not a number", []string{"Bearer " + es(claims("exp", "tomorrow"))}},
		{"wrong iss", []string{"Bearer " + es(claims("iss", "https://evil.example.com"))}},
		{"iss in another case", []string{"Bearer " + es(claims("iss", strings.ToUpper(jwtIssuer)))}},
		{"no iss", []string{"Bearer " + es(claims("iss", nil))}},
		{"aud without the audience", []string{"Bearer " + es(claims("aud", []string{"other"}))}},
		{"no aud", []string{"Bearer " + es(claims("aud", nil))}},
		{"no sub", []string{"Bearer " + es(claims("sub", nil))}},
		{"empty sub", []string{"Bearer " + es(claims("sub", ""))}},
		{"sub a number", []string{"Bearer " + es(claims("sub", 42))}},
		{"sub null", []string{"Bearer " + es(claims("sub", json.RawMessage("null")))}},
		{"sub an array", []string{"Bearer " + es(claims("sub", []string{"alice"}))}},
		{"groups a number", []string{"Bearer " + es(claims("groups", 42))}},
		{"groups an object", []string{"Bearer " + es(claims("groups", map[string]string{"a": "b"}))}},
		{"groups with a number", []string{"Bearer " + es(claims("groups", []any{"a", 1}))}},
		{"groups with null", []string{"Bearer " + es(claims("groups", []any{"a", nil}))}},
		{"sub twice", []string{"Bearer " + es(append([]byte(`{"sub":"alice","sub":"mallory",`), mustJSON(t, claims("sub", nil))[1:]...))}},
		{"payload not an object", []string{"Bearer " + es([]byte(`"alice"`))}},
		{"tampered payload", []string{"Bearer " + tampered}},
		{"signed by another key, same kid", []string{"Bearer " + signJWT(t, jose.ES256, k.ec2, "ec1", claims(), nil)}},
		{"signed by another key, no kid", []string{"Bearer " + signJWT(t, jose.EdDSA, k.ed2, "", claims(), nil)}},
		{"embedded jwk of another key", []string{"Bearer " + signJWT(t, jose.EdDSA, k.ed2, "", claims(), &jose.SignerOptions{EmbedJWK: true})}},
		{"unknown kid", []string{"Bearer " + signJWT(t, jose.ES256, k.ec1, "ec9", claims(), nil)}},
		{"kid of a key of another type", []string{"Bearer " + signJWT(t, jose.ES256, k.ec1, "rsa1", claims(), nil)}},
		{"alg not allowed (PS384)", []string{"Bearer " + signJWT(t, jose.PS384, k.rsa1, "rsa1", claims(), nil)}},
		{"alg none", []string{"Bearer " + unsignedJWT(`{"alg":"none","typ":"JWT"}`, claims())}},
		{"alg none with kid", []string{"Bearer " + unsignedJWT(`{"alg":"none","kid":"rsa1"}`, claims())}},
		{"HS256 keyed with the RSA public key PEM", []string{"Bearer " + signJWT(t, jose.HS256, rsaPEM, "rsa1", claims(), nil)}},
		{"HS256 keyed with the RSA public key DER", []string{"Bearer " + signJWT(t, jose.HS256, rsaPub, "", claims(), nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, ok := identifyAuth(t, j, tc.auth...); ok {
				t.Errorf("got %+v, want anonymous", c)
			}
		})
	}
}

// TestJWTIdentifyLength checks the 8 KiB bound: a valid token of 8192
// bytes is read, one longer is not.
func TestJWTIdentifyLength(t *testing.T) {
	k := jwtKeys()
	j := mustJWT(t, stdJWKS(t), nil)
	sign := func(pad int) string {
		return signJWT(t, jose.EdDSA, k.ed1, "ed1", claims("pad", strings.Repeat("x", pad)), nil)
	}
	pad := (8192 - len(sign(0))) * 3 / 4
	for len(sign(pad)) < 8192 {
		pad++
	}
	for len(sign(pad)) > 8192 {
		pad--
	}
	atMost, over := sign(pad), sign(pad+3)
	if len(over) <= 8192 {
		t.Fatalf("over: %d bytes", len(over))
	}
	if _, ok := identifyAuth(t, j, "Bearer "+atMost); !ok {
		t.Errorf("a %d-byte token: anonymous, want alice", len(atMost))
	}
	if _, ok := identifyAuth(t, j, "Bearer "+over); ok {
		t.Errorf("a %d-byte token: identified, want anonymous", len(over))
	}
}

func TestJWTAlgorithms(t *testing.T) {
	k := jwtKeys()
	j := mustJWT(t, stdJWKS(t), func(o *identity.JWTOptions) { o.Algorithms = []string{"ES256", "PS384"} })
	for _, tc := range []struct {
		alg  jose.SignatureAlgorithm
		priv any
		kid  string
		want bool
	}{
		{jose.ES256, k.ec1, "ec1", true},
		{jose.PS384, k.rsa1, "rsa1", true},
		{jose.RS256, k.rsa1, "rsa1", false},
		{jose.EdDSA, k.ed1, "ed1", false},
	} {
		if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, tc.alg, tc.priv, tc.kid, claims(), nil)); ok != tc.want {
			t.Errorf("%s: identified %v, want %v", tc.alg, ok, tc.want)
		}
	}
}

// TestJWTKid checks that a token's kid chooses its key, and that a token
// without one is tried with every key.
func TestJWTKid(t *testing.T) {
	k := jwtKeys()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, pubJWK(k.rsa1, "a"), pubJWK(k.rsa2, "b"))
	j := mustJWT(t, path, nil)
	for _, tc := range []struct {
		name string
		priv *rsa.PrivateKey
		kid  string
		want bool
	}{
		{"key b, kid b", k.rsa2, "b", true},
		{"key a, kid a", k.rsa1, "a", true},
		{"key b, kid a", k.rsa2, "a", false},
		{"key a, kid b", k.rsa1, "b", false},
		{"key a, no kid", k.rsa1, "", true},
		{"key b, no kid", k.rsa2, "", true},
	} {
		if _, ok := identifyAuth(t, j, "Bearer "+signJWT(t, jose.RS256, tc.priv, tc.kid, claims(), nil)); ok != tc.want {
			t.Errorf("%s: identified %v, want %v", tc.name, ok, tc.want)
		}
	}
}

// FuzzJWTIdentify feeds Identify arbitrary Authorization lines: it must
// not panic, and a caller it names must come from a token signed by a
// key of the set.
func FuzzJWTIdentify(f *testing.F) {
	k := jwtKeys()
	path := stdJWKS(f)
	j := mustJWT(f, path, nil)
	set := []any{&k.rsa1.PublicKey, &k.ec1.PublicKey, k.ed1.Public()}
	valid := signJWT(f, jose.ES256, k.ec1, "ec1", claims(), nil)
	for _, seed := range [][2]string{
		{"Bearer " + valid, ""},
		{"Bearer " + signJWT(f, jose.RS256, k.rsa1, "", claims(), nil), ""},
		{"Bearer " + signJWT(f, jose.EdDSA, k.ed1, "ed1", claims("groups", "g"), nil), ""},
		{"Bearer " + signJWT(f, jose.EdDSA, k.ed2, "ed1", claims(), nil), ""},
		{"Bearer " + unsignedJWT(`{"alg":"none"}`, claims()), ""},
		{"Bearer " + valid, "Bearer " + valid},
		{"Token " + valid, ""},
		{"Bearer a.b.c", ""},
		{"Bearer ..", ""},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		auth := []string{line1}
		if line2 != "" {
			auth = append(auth, line2)
		}
		c, ok := identifyAuth(t, j, auth...)
		if !ok {
			return
		}
		if c.UserID == "" {
			t.Fatalf("identified %+v with no user", c)
		}
		// Verify the token independently: it must be one token, signed by a key of the set.
		fields := strings.FieldsFunc(strings.Join(auth, ","), func(r rune) bool { return strings.ContainsRune(" \t\n\r\v\f", r) })
		if len(fields) != 2 {
			t.Fatalf("identified %+v from %d fields", c, len(fields))
		}
		sig, err := jose.ParseSignedCompact(fields[1], []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.ES256, jose.ES384, jose.EdDSA})
		if err != nil {
			t.Fatalf("identified %+v from a token go-jose can't parse: %v", c, err)
		}
		for _, key := range set {
			if _, err := sig.Verify(key); err == nil {
				return
			}
		}
		t.Fatalf("identified %+v from a token no key of the set signed", c)
	})
}
