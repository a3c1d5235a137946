// Package identity tells who makes a request: the Identifier interface and
// its resolvers (Header: a trusted auth proxy's headers; Tokens: a tokens
// file; Upstream: the API's /user/ lookup with its cache of hashed
// credentials; Staff: the staff tokens before another resolver).
// It knows nothing of the gateway: the http package uses it through
// Identifier, and cmd/capgate builds the resolvers.
//
// JWT knows callers from "Authorization: Bearer" JSON Web Tokens,
// verified locally against a JSON Web Key Set file (signature, allowed
// algorithms, issuer, audience, expiry) with go-jose; Reload re-reads the
// file, and a bad one leaves the keys in force.
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"unicode/utf8"
)

// Caller is who makes a call, as an identity resolver found it.
type Caller struct {
	UserID string   // the username
	Staff  bool     // is_staff or is_superuser
	Groups []string // auth groups
}

// Identifier tells who makes a request: the gateway's identity resolvers
// (upstream lookup, trusted headers, a tokens file) implement it, and the
// staff API uses the same one.
type Identifier interface {
	// Identify returns the caller of r. ok is false when it names nobody:
	// r carries no credential, or one it can't verify (an unknown token,
	// a JWT it refuses, the API answered 401); the middleware then passes
	// a call with no credential at all untouched and gates any other as
	// AnonymousUser (one rule for every Identifier). An error means the
	// lookup itself failed (timeout, upstream error): the middleware
	// gates the call as "(unidentified)" (AdmitOptions.Unidentified).
	Identify(ctx context.Context, r *http.Request) (c Caller, ok bool, err error)
}

// The headers an auth proxy in front sets for Header.
const (
	headerUser   = "X-Capgate-User"   // the username
	headerGroups = "X-Capgate-Groups" // auth groups, comma-separated
	headerStaff  = "X-Capgate-Staff"  // true or 1 (any case) for staff
)

// Header trusts the caller headers an auth proxy sets
// (--identity header): X-Capgate-User, X-Capgate-Groups and X-Capgate-Staff.
// They are believed only on requests whose peer address is in Trusted; on
// any other request, and on one without X-Capgate-User, the caller is
// anonymous. It never returns an error. Safe for concurrent use.
type Header struct {
	Trusted []netip.Prefix
}

// NewHeader returns a Header trusting cidrs
// (--trusted-proxies, read by ParseTrustedProxies). It returns an error
// naming the first entry that does not parse.
func NewHeader(cidrs []string) (*Header, error) {
	trusted, err := ParseTrustedProxies(cidrs)
	if err != nil {
		return nil, err
	}
	return &Header{Trusted: trusted}, nil
}

// ParseTrustedProxies reads --trusted-proxies: CIDRs, or bare addresses
// meaning just that address; empty entries are skipped. IPv4-mapped IPv6
// prefixes are turned into IPv4 ones and every prefix is masked, as peers'
// addresses are unmapped before they are matched, so the gateway's trust
// (X-Forwarded-*) and Header's (X-Capgate-*) are the same one.
func ParseTrustedProxies(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxy %q: want a CIDR such as 10.0.0.0/8 or an address", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Identify implements Identifier.
func (h *Header) Identify(_ context.Context, r *http.Request) (Caller, bool, error) {
	if !h.trusted(r.RemoteAddr) {
		return Caller{}, false, nil
	}
	user := strings.TrimSpace(r.Header.Get(headerUser))
	if user == "" {
		return Caller{}, false, nil
	}
	var groups []string
	for g := range strings.SplitSeq(r.Header.Get(headerGroups), ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	staff := strings.TrimSpace(r.Header.Get(headerStaff))
	return Caller{
		UserID: user,
		Staff:  staff == "1" || strings.EqualFold(staff, "true"),
		Groups: groups,
	}, true, nil
}

// trusted reports whether the peer at remoteAddr ("host:port") is a
// trusted proxy.
func (h *Header) trusted(remoteAddr string) bool { return TrustedPeer(h.Trusted, remoteAddr) }

// TrustedPeer reports whether the peer at remoteAddr ("host:port") is in
// one of trusted (the proxies whose forwarding headers are believed).
func TrustedPeer(trusted []netip.Prefix, remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// TokenEntry is one entry of a tokens file.
type TokenEntry struct {
	Token      string   `json:"token"`
	Username   string   `json:"username"`
	IsStaff    bool     `json:"is_staff"`
	AuthGroups []string `json:"auth_groups"`
}

// Tokens knows callers from a fixed list of tokens
// (--identity tokens), for small deployments, the demo and tests. A request
// carries its token as "Authorization: Token <t>" or "Bearer <t>"; one
// without, or with a token not in the list, is anonymous. It never returns
// an error. The tokens are kept only as their SHA-256. Safe for concurrent use.
type Tokens struct {
	callers map[credKey]Caller
}

// NewTokens returns the Tokens knowing entries. It returns an
// error for an entry with no token or username, or a token given twice.
func NewTokens(entries []TokenEntry) (*Tokens, error) {
	t := &Tokens{callers: make(map[credKey]Caller, len(entries))}
	for i, e := range entries {
		if e.Token == "" || e.Username == "" {
			return nil, fmt.Errorf("tokens: entry %d: token and username are required", i)
		}
		k := credKey(sha256.Sum256([]byte(e.Token)))
		if _, dup := t.callers[k]; dup {
			return nil, fmt.Errorf("tokens: entry %d (%s): the token is given twice", i, e.Username)
		}
		t.callers[k] = Caller{UserID: e.Username, Staff: e.IsStaff, Groups: e.AuthGroups}
	}
	return t, nil
}

// LoadTokens reads a tokens file (ReadTokens) and returns the Tokens
// knowing its entries. It returns an error as ReadTokens and
// NewTokens do.
func LoadTokens(path string) (*Tokens, error) {
	entries, err := ReadTokens(path)
	if err != nil {
		return nil, err
	}
	return NewTokens(entries)
}

// ReadTokens reads a tokens file (--tokens): a JSON array of {"token",
// "username", "is_staff", "auth_groups"}, nothing else. It is the one
// parser of the file, for the gateway and the capacity CLI alike. It
// returns an error if the file can't be read, is not such an array, or
// has data after it.
func ReadTokens(path string) ([]TokenEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	defer f.Close()
	var entries []TokenEntry
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("tokens: %s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("tokens: %s: data after the array", path)
	}
	return entries, nil
}

// Identify implements Identifier.
func (t *Tokens) Identify(_ context.Context, r *http.Request) (Caller, bool, error) {
	tok, ok := bearer(joined(r.Header, "Authorization")) // as gunicorn hands it to DRF
	if !ok {
		return Caller{}, false, nil
	}
	c, ok := t.callers[credKey(sha256.Sum256([]byte(tok)))]
	return c, ok, nil
}

// bearer returns the token of an "Authorization: Token <t>" or
// "Bearer <t>" header (scheme in any case), split as Django REST framework
// splits it: on any run of ASCII whitespace, exactly two parts.
func bearer(auth string) (string, bool) {
	parts := splitASCIISpace(auth)
	if len(parts) != 2 || !(strings.EqualFold(parts[0], "Token") || strings.EqualFold(parts[0], "Bearer")) {
		return "", false
	}
	return parts[1], true
}

// splitASCIISpace splits s as Python's bytes.split() does: on runs of
// space, tab, newline, carriage return, vertical tab and form feed.
func splitASCIISpace(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
	})
}

var (
	_ Identifier = (*Header)(nil)
	_ Identifier = (*Tokens)(nil)
)

// AnonymousUser is the user id under which the gateway's middleware gates
// the heavy calls of callers who carry a credential no Identifier can
// verify (a token not in the file, a JWT it refuses, header identity
// without a trusted proxy's word, a lookup the API answered 401). The
// parentheses keep it apart from any Django username.
const AnonymousUser = "(anonymous)"

// MaxUsername is the longest username, in characters, capgate accepts as
// an identity (Django's username max_length). A longer one, however it was
// learned, makes the caller anonymous (and is logged): it would only make
// long lane keys and log lines.
const MaxUsername = 150

// ValidUsername reports whether u is short enough to be a username (at
// most MaxUsername characters); the middleware and the staff API refuse a
// caller whose resolver returned a longer one.
func ValidUsername(u string) bool { return utf8.RuneCountInString(u) <= MaxUsername }

// joined returns the values of the header named by canonical key k as the
// API's server hands it to the application: joined with "," (gunicorn).
// strings.Join returns a single value as it is, without copying.
func joined(h http.Header, k string) string { return strings.Join(h[k], ",") }
