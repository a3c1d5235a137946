package identity

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejson "github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"
)

// DefaultJWTLeeway is the clock skew JWT allows on a token's exp, nbf and
// iat when JWTOptions.Leeway is zero.
const DefaultJWTLeeway = 30 * time.Second

// maxJWTBytes is the longest token JWT reads; a longer one is anonymous
// without being parsed.
const maxJWTBytes = 8 << 10

// defaultJWTAlgorithms are the "alg" values JWT accepts when
// JWTOptions.Algorithms is empty.
var defaultJWTAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.ES256, jose.ES384, jose.EdDSA,
}

// JWTOptions configure a JWT resolver. Zero values are documented per field.
type JWTOptions struct {
	// JWKSFile is required: a JSON Web Key Set file ({"keys":[...]}) of
	// RSA, EC (P-256, P-384, P-521) or Ed25519 public keys.
	JWKSFile string
	// Issuer is required: the "iss" every token must carry, exactly.
	Issuer string
	// Audience is required: a value the token's "aud" (a string or an
	// array of strings) must contain.
	Audience string
	// UserClaim is the claim naming the user, a non-empty string; "" means
	// "sub".
	UserClaim string
	// GroupsClaim is the claim holding the user's groups: a JSON array of
	// strings, or one string (one group). "" means "groups". A missing or
	// null claim means no groups; empty strings are dropped.
	GroupsClaim string
	// StaffClaim is a boolean claim that marks staff: the caller is staff
	// when it is JSON true. "" means none: nobody is staff by token.
	StaffClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat; 0 means
	// DefaultJWTLeeway. It may not be negative.
	Leeway time.Duration
	// Algorithms are the "alg" values accepted; empty means RS256, RS384,
	// RS512, PS256, ES256, ES384 and EdDSA. PS384, PS512 and ES512 may be
	// added; "none" and the HMAC algorithms (HS256, HS384, HS512) are
	// never accepted.
	Algorithms []string
	// Now is the clock tokens are checked against; nil means time.Now.
	Now func() time.Time
}

// JWT knows callers from "Authorization: Bearer <jwt>" tokens verified
// against a JSON Web Key Set file. A token is
// believed when its signature verifies with a key of the set (the key
// named by its "kid" header; without one, each key of the right type),
// its "alg" is allowed, its "iss" is the Issuer, its "aud" contains the
// Audience, it has an "exp" and is not expired, not yet valid or issued in the future
// (allowing Leeway), it names its user and its groups claim has the right
// type. Any other request names nobody (ok false: the middleware gates a
// call with a credential it can't verify as AnonymousUser): Identify never
// returns an error, and never logs or returns the token. A token longer
// than 8 KiB names nobody without being parsed.
//
// Reload re-reads the key set (on SIGHUP); a bad file leaves the keys in
// force. Identify takes no lock. Safe for concurrent use.
type JWT struct {
	path     string
	expected jwt.Expected // Issuer and AnyAudience; Time is set per token
	user     string
	groups   string
	staff    string
	leeway   time.Duration
	algs     []jose.SignatureAlgorithm
	now      func() time.Time

	keys     atomic.Pointer[[]jose.JSONWebKey] // the usable public keys in force
	reloadMu sync.Mutex                        // serializes Reload, so the newest read wins
}

var _ Identifier = (*JWT)(nil)

// NewJWT returns a JWT configured by o, with the keys of o.JWKSFile. It
// returns an error when a required option is missing, the leeway is
// negative or an algorithm is unknown, "none" or HMAC, and an error
// naming the file when it can't be read, isn't a JWKS, holds a private
// or symmetric key, or holds no usable public key (keys of a type go-jose
// doesn't know, with "use" other than "sig", or fit for no allowed
// algorithm are skipped).
func NewJWT(o JWTOptions) (*JWT, error) {
	switch {
	case o.JWKSFile == "":
		return nil, errors.New("jwt: a JWKS file is required")
	case o.Issuer == "":
		return nil, errors.New("jwt: an issuer is required")
	case o.Audience == "":
		return nil, errors.New("jwt: an audience is required")
	case o.Leeway < 0:
		return nil, fmt.Errorf("jwt: leeway %v is negative", o.Leeway)
	}
	j := &JWT{
		path:     o.JWKSFile,
		expected: jwt.Expected{Issuer: o.Issuer, AnyAudience: jwt.Audience{o.Audience}},
		user:     cmp.Or(o.UserClaim, "sub"),
		groups:   cmp.Or(o.GroupsClaim, "groups"),
		staff:    o.StaffClaim,
		leeway:   o.Leeway,
		algs:     defaultJWTAlgorithms,
		now:      o.Now,
	}
	if j.leeway == 0 {
		j.leeway = DefaultJWTLeeway
	}
	if j.now == nil {
		j.now = time.Now
	}
	if len(o.Algorithms) > 0 {
		j.algs = make([]jose.SignatureAlgorithm, 0, len(o.Algorithms))
		for _, a := range o.Algorithms {
			alg, err := parseJWTAlgorithm(a)
			if err != nil {
				return nil, err
			}
			j.algs = append(j.algs, alg)
		}
	}
	keys, err := j.load()
	if err != nil {
		return nil, err
	}
	j.keys.Store(&keys)
	return j, nil
}

// parseJWTAlgorithm returns the signature algorithm named a, or an error
// when it is unknown, "none" or HMAC.
func parseJWTAlgorithm(a string) (jose.SignatureAlgorithm, error) {
	switch alg := jose.SignatureAlgorithm(a); alg {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
		jose.ES256, jose.ES384, jose.ES512, jose.EdDSA:
		return alg, nil
	case "none", jose.HS256, jose.HS384, jose.HS512:
		return "", fmt.Errorf("jwt: algorithm %q is never accepted (none and HMAC are not)", a)
	default:
		return "", fmt.Errorf("jwt: unknown algorithm %q: want RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 or EdDSA", a)
	}
}

// Reload re-reads the JWKS file and puts its keys in force. On any error
// (NewJWT's file errors) the keys in force stay, and the error says why.
func (j *JWT) Reload() error {
	j.reloadMu.Lock()
	defer j.reloadMu.Unlock()
	keys, err := j.load()
	if err != nil {
		return err
	}
	j.keys.Store(&keys)
	return nil
}

// KeyCount returns the number of keys in force (usable public keys of the
// last good read of the JWKS file).
func (j *JWT) KeyCount() int { return len(*j.keys.Load()) }

// load reads the JWKS file and returns its usable public keys. It returns
// an error naming the file when it can't be read, isn't a JWKS, holds a
// private or symmetric key, or holds no usable key.
func (j *JWT) load() ([]jose.JSONWebKey, error) {
	b, err := os.ReadFile(j.path)
	if err != nil {
		return nil, fmt.Errorf("jwt: read jwks: %w", err)
	}
	keys, err := parseJWKS(b, j.algs)
	if err != nil {
		return nil, fmt.Errorf("jwt: jwks %s: %w", j.path, err)
	}
	return keys, nil
}

// parseJWKS reads a JWK Set and returns its keys usable with one of algs.
// Keys of a type go-jose doesn't know are skipped (RFC 7517 §5), as are
// keys for encryption; a private or symmetric key is an error, as a file
// with no usable key is. It decodes with go-jose's JSON, as go-jose reads
// the keys: names match exactly, and a name given twice is an error.
func parseJWKS(b []byte, algs []jose.SignatureAlgorithm) ([]jose.JSONWebKey, error) {
	var set struct {
		Keys *[]josejson.RawMessage `json:"keys"`
	}
	if err := josejson.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if set.Keys == nil {
		return nil, errors.New(`not a JSON Web Key Set: no "keys" array`)
	}
	var keys []jose.JSONWebKey
	for i, raw := range *set.Keys {
		// Private members are refused before go-jose parses the key, so
		// that one of a type it skips is refused too.
		var private struct {
			Kty  string              `json:"kty"`
			Kid  string              `json:"kid"`
			D    josejson.RawMessage `json:"d"`
			P    josejson.RawMessage `json:"p"`
			Q    josejson.RawMessage `json:"q"`
			Dp   josejson.RawMessage `json:"dp"`
			Dq   josejson.RawMessage `json:"dq"`
			Qi   josejson.RawMessage `json:"qi"`
			Oth  josejson.RawMessage `json:"oth"`
			K    josejson.RawMessage `json:"k"`
			Priv josejson.RawMessage `json:"priv"`
		}
		if err := josejson.Unmarshal(raw, &private); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		switch {
		case private.Kty == "oct" || private.K != nil:
			return nil, fmt.Errorf("key %d (kid %q) is a symmetric key: give only public keys", i, private.Kid)
		case private.D != nil || private.P != nil || private.Q != nil || private.Dp != nil ||
			private.Dq != nil || private.Qi != nil || private.Priv != nil || private.Oth != nil:
			return nil, fmt.Errorf("key %d (kid %q) is a private key: give only public keys", i, private.Kid)
		}
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); errors.Is(err, jose.ErrUnsupportedKeyType) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, private.Kid, err)
		}
		if !k.IsPublic() || !k.Valid() {
			return nil, fmt.Errorf("key %d (kid %q) is not a public key", i, k.KeyID)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		for _, alg := range algs {
			if jwkFits(&k, alg) {
				keys = append(keys, k)
				break
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no usable public key (RSA, EC or Ed25519, for signatures, fit for one of %v)", algs)
	}
	return keys, nil
}

// jwkFits reports whether k can verify a signature made with alg: its type
// (and curve) is alg's, and its own "alg", if any, is alg.
func jwkFits(k *jose.JSONWebKey, alg jose.SignatureAlgorithm) bool {
	if k.Algorithm != "" && k.Algorithm != string(alg) {
		return false
	}
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		switch alg {
		case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
			return true
		}
	case *ecdsa.PublicKey:
		switch alg {
		case jose.ES256:
			return key.Curve == elliptic.P256()
		case jose.ES384:
			return key.Curve == elliptic.P384()
		case jose.ES512:
			return key.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == jose.EdDSA
	}
	return false
}

// Identify implements Identifier.
func (j *JWT) Identify(_ context.Context, r *http.Request) (Caller, bool, error) {
	tok, ok := bearerOnly(joined(r.Header, "Authorization")) // as gunicorn hands it to the app
	if !ok || len(tok) > maxJWTBytes {
		return Caller{}, false, nil
	}
	c, ok := j.verify(tok)
	return c, ok, nil
}

// bearerOnly returns the token of an "Authorization: Bearer <t>" header
// (scheme in any case), split as bearer splits it; a JWT has no other
// scheme.
func bearerOnly(auth string) (string, bool) {
	parts := splitASCIISpace(auth)
	if len(parts) != 2 || !strings.EqualFold(parts[0], "Bearer") {
		return "", false
	}
	return parts[1], true
}

// verify returns the caller tok names, if its signature, header and claims
// are all good.
func (j *JWT) verify(tok string) (Caller, bool) {
	sig, err := jose.ParseSignedCompact(tok, j.algs) // refuses an alg not in j.algs
	if err != nil || len(sig.Signatures) != 1 {
		return Caller{}, false
	}
	h := sig.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	var payload []byte
	verified := false
	keys := *j.keys.Load()
	for i := range keys {
		k := &keys[i]
		if (h.KeyID != "" && k.KeyID != h.KeyID) || !jwkFits(k, alg) {
			continue
		}
		if payload, err = sig.Verify(k.Key); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Caller{}, false
	}
	return j.claims(payload)
}

// claims returns the caller named by a verified token's payload, if its
// registered claims are valid now and its user and groups claims are
// well formed. It decodes with go-jose's JSON, which matches names
// exactly, as go-jose reads the registered claims.
func (j *JWT) claims(payload []byte) (Caller, bool) {
	var std jwt.Claims
	var all map[string]josejson.RawMessage
	if josejson.Unmarshal(payload, &std) != nil || josejson.Unmarshal(payload, &all) != nil {
		return Caller{}, false
	}
	// A token must expire: one without exp would name its holder for good,
	// whatever happens to the key that signed it.
	if std.Expiry == nil || std.ValidateWithLeeway(j.expected.WithTime(j.now()), j.leeway) != nil {
		return Caller{}, false
	}
	var user string
	if raw, ok := all[j.user]; !ok || josejson.Unmarshal(raw, &user) != nil || user == "" {
		return Caller{}, false
	}
	groups, ok := jwtGroups(all[j.groups])
	if !ok {
		return Caller{}, false
	}
	var staff bool
	if j.staff != "" {
		var v any
		staff = josejson.Unmarshal(all[j.staff], &v) == nil && v == true
	}
	return Caller{UserID: user, Staff: staff, Groups: groups}, true
}

// jwtGroups reads a groups claim: absent or null (no groups), one string
// or an array of strings. Empty strings are dropped. ok is false for any
// other value.
func jwtGroups(raw josejson.RawMessage) (groups []string, ok bool) {
	if raw == nil {
		return nil, true
	}
	var v any
	if josejson.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	switch v := v.(type) {
	case nil:
		return nil, true
	case string:
		if v == "" {
			return nil, true
		}
		return []string{v}, true
	case []any:
		for _, g := range v {
			s, ok := g.(string)
			if !ok {
				return nil, false
			}
			if s != "" {
				groups = append(groups, s)
			}
		}
		return groups, true
	}
	return nil, false
}
