package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults of Upstream.
const (
	defaultIdentityTTL          = 60 * time.Second // how long a caller is cached
	defaultUnauthorizedTTL      = 5 * time.Second  // how long a 401 is cached
	defaultIdentityTimeout      = time.Second      // the longest one lookup may take
	defaultIdentityCacheEntries = 10000            // credentials cached at most
)

// maxUserBody bounds what is read of a /user/ answer.
const maxUserBody = 1 << 20

// ErrLookup is wrapped by the error of a lookup that failed: the API
// answered with an unexpected status or an unreadable body.
var ErrLookup = errors.New("user lookup failed")

// Upstream learns who calls by asking the API: GET
// <upstream>/user/?includeAuthGroups=true with the credential the API will
// use (--identity upstream), so a caller the API knows by a session cookie
// is known here too. It uses the answer's username, is_staff, is_superuser
// and auth_groups, with keys matched exactly. It never follows a redirect:
// a 3xx answer is a failed lookup.
//
// The credential is read as the API (DRF's token, then session
// authentication, behind gunicorn) reads it: the Authorization value
// (repeated lines joined with ","), when it holds anything, alone; only if
// the API does not know that (another scheme, which DRF's token check
// skips) and the request has a session cookie, Authorization and the
// session cookie together; with no Authorization, the session cookie alone
// (SessionCookie, parsed as Django parses the Cookie header). Other cookies
// play no part, so junk cookies can't defeat the cache.
//
// Answers are cached per credential, keyed by its SHA-256 (never the raw
// token), for TTL; the cache holds at most CacheEntries credentials and
// evicts the least recently used. Concurrent lookups of one credential
// share one request. A 401 or 403 means the API does not take the
// credential: ok is false (the middleware gates a call carrying it as
// AnonymousUser), and that is cached for UnauthorizedTTL. A request with neither credential is
// anonymous and triggers no lookup. A lookup that fails or takes longer
// than Timeout returns an error; it is not cached.
//
// Create one with NewUpstream and set fields before first use. Safe
// for concurrent use.
type Upstream struct {
	// Client makes the lookups. Default: a client on http.DefaultTransport.
	Client *http.Client
	// TTL is how long a caller is cached. Default 60 s.
	TTL time.Duration
	// UnauthorizedTTL is how long a rejected credential is cached. Default
	// 5 s.
	UnauthorizedTTL time.Duration
	// Timeout bounds one lookup. Default 1 s.
	Timeout time.Duration
	// CacheEntries bounds the cache. Default 10 000.
	CacheEntries int
	// SessionCookie is the name of the API's session cookie. Default
	// "sessionid" (Django's).
	SessionCookie string
	// Now is the clock of the cache. Default time.Now.
	Now func() time.Time

	url string // <upstream>/user/?includeAuthGroups=true

	once  sync.Once
	cache *identityCache

	mu      sync.Mutex
	flights map[credKey]*flight // lookups in progress; requires mu held
}

// flight is one lookup in progress; waiters read its result once done is
// closed.
type flight struct {
	done chan struct{}
	e    identityEntry
	err  error
}

// NewUpstream returns a resolver that asks the API at upstream (an
// absolute http or https URL, possibly with a path) with the defaults. It
// returns an error for a URL that is not absolute http(s).
func NewUpstream(upstream string) (*Upstream, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream identity: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream identity: %q is not an absolute http(s) URL", upstream)
	}
	u = u.JoinPath("user/")
	u.RawQuery = "includeAuthGroups=true"
	u.Fragment = ""
	return &Upstream{url: u.String()}, nil
}

func (u *Upstream) init() {
	u.once.Do(func() {
		n := u.CacheEntries
		if n <= 0 {
			n = defaultIdentityCacheEntries
		}
		u.cache = newIdentityCache(n)
		u.flights = make(map[credKey]*flight)
	})
}

func (u *Upstream) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

// Identify implements Identifier.
func (u *Upstream) Identify(ctx context.Context, r *http.Request) (Caller, bool, error) {
	// The credentials as the API reads them: DRF's TokenAuthentication
	// first, from Authorization (gunicorn joins repeated lines with ","),
	// then SessionAuthentication, from the session cookie alone.
	auth := joined(r.Header, "Authorization")
	hasAuth := len(splitASCIISpace(auth)) > 0
	session, hasSession := djangoCookie(joined(r.Header, "Cookie"), u.sessionCookie())
	switch {
	case hasAuth:
		// The token decides when it names a caller: no cookie then
		// plays a part, so junk cookies can't defeat the cache.
		c, ok, err := u.resolve(ctx, credentials{auth: auth, hasAuth: true})
		if err != nil || ok || !hasSession {
			return c, ok, err
		}
		// An Authorization DRF's token check skips (another scheme):
		// the API may still know the caller by the session.
		return u.resolve(ctx, credentials{auth: auth, hasAuth: true, session: session, hasSession: true})
	case hasSession:
		return u.resolve(ctx, credentials{session: session, hasSession: true})
	}
	return Caller{}, false, nil
}

// sessionCookie returns the session cookie's name.
func (u *Upstream) sessionCookie() string {
	if u.SessionCookie != "" {
		return u.SessionCookie
	}
	return defaultSessionCookie
}

// resolve returns the caller cred names, from the cache or one lookup
// shared by every request with the same cred.
func (u *Upstream) resolve(ctx context.Context, cred credentials) (Caller, bool, error) {
	u.init()
	k := cred.key()
	if e, ok := u.cache.get(k, u.now()); ok {
		return e.caller, e.ok, nil
	}

	u.mu.Lock()
	f, waiting := u.flights[k]
	if !waiting {
		f = &flight{done: make(chan struct{})}
		u.flights[k] = f
	}
	u.mu.Unlock()

	if waiting {
		select {
		case <-f.done:
			return f.e.caller, f.e.ok, f.err
		case <-ctx.Done():
			return Caller{}, false, fmt.Errorf("identify caller: %w", ctx.Err())
		}
	}

	// The lookup is shared, so it doesn't end when this request's client
	// goes away; Timeout bounds it.
	f.e, f.err = u.lookup(context.WithoutCancel(ctx), cred)
	if f.err == nil {
		f.e.key = k
		u.cache.put(f.e)
	}
	u.mu.Lock()
	delete(u.flights, k)
	u.mu.Unlock()
	close(f.done)
	return f.e.caller, f.e.ok, f.err
}

// credentials are what one lookup sends: the Authorization value as the
// API reads it, and the session cookie's value.
type credentials struct {
	auth       string
	hasAuth    bool
	session    string
	hasSession bool
}

// key hashes the credentials, each part length-prefixed, so no two
// different ones share a key.
func (c credentials) key() credKey {
	h := sha256.New()
	fmt.Fprintf(h, "a%t:%d:%s;s%t:%d:%s;", c.hasAuth, len(c.auth), c.auth, c.hasSession, len(c.session), c.session)
	var k credKey
	h.Sum(k[:0])
	return k
}

// defaultSessionCookie is the name of Django's session cookie
// (SESSION_COOKIE_NAME).
const defaultSessionCookie = "sessionid"

// djangoCookie returns the value of the cookie named name in a Cookie
// header as Django's parse_cookie reads it: chunks split on ";", each cut
// at its first "=" (a chunk without one is a value with no name), name and
// value stripped of whitespace as Python strips a Latin-1 string, the last
// chunk of a name winning. ok is false when there is no such cookie.
func djangoCookie(header, name string) (value string, ok bool) {
	for chunk := range strings.SplitSeq(header, ";") {
		k, v, eq := strings.Cut(chunk, "=")
		if !eq {
			k, v = "", chunk
		}
		if pyStrip(k) == name {
			value, ok = pyStrip(v), true
		}
	}
	return value, ok
}

// pyStrip strips s as Python's str.strip() strips the Latin-1 string WSGI
// makes of a header: ASCII whitespace, \x1c–\x1f, \x85 and \xa0.
func pyStrip(s string) string {
	isSpace := func(c byte) bool {
		return c == ' ' || c >= '\t' && c <= '\r' || c >= 0x1c && c <= 0x1f || c == 0x85 || c == 0xa0
	}
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}

// userAnswer is the part of the API's /user/ answer used.
type userAnswer struct {
	Username    string   `json:"username"`
	IsStaff     bool     `json:"is_staff"`
	IsSuperuser bool     `json:"is_superuser"`
	AuthGroups  []string `json:"auth_groups"`
}

// lookup asks the API who auth is.
func (u *Upstream) lookup(ctx context.Context, cred credentials) (identityEntry, error) {
	timeout := u.Timeout
	if timeout <= 0 {
		timeout = defaultIdentityTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return identityEntry{}, fmt.Errorf("identify caller: %w", err)
	}
	if cred.hasAuth {
		req.Header.Set("Authorization", cred.auth)
	}
	if cred.hasSession {
		req.Header.Set("Cookie", u.sessionCookie()+"="+cred.session)
	}
	req.Header.Set("Accept", "application/json")
	client := http.Client{}
	if u.Client != nil {
		client = *u.Client
	}
	// A redirect could point the credential, and the answer, at another
	// server: a 3xx is a failed lookup.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error quotes the URL, which holds no credential.
		return identityEntry{}, fmt.Errorf("identify caller: %w", err)
	}
	defer resp.Body.Close()

	now := u.now()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUserBody))
		ttl := u.UnauthorizedTTL
		if ttl <= 0 {
			ttl = defaultUnauthorizedTTL
		}
		return identityEntry{expires: now.Add(ttl)}, nil
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUserBody))
		return identityEntry{}, fmt.Errorf("identify caller: %w: GET /user/ answered %d", ErrLookup, resp.StatusCode)
	}

	ans, err := decodeUserAnswer(io.LimitReader(resp.Body, maxUserBody))
	if err != nil {
		return identityEntry{}, fmt.Errorf("identify caller: %w: decode /user/: %w", ErrLookup, err)
	}
	if ans.Username == "" {
		return identityEntry{}, fmt.Errorf("identify caller: %w: /user/ gave no username", ErrLookup)
	}
	ttl := u.TTL
	if ttl <= 0 {
		ttl = defaultIdentityTTL
	}
	if !ValidUsername(ans.Username) {
		// Not a name Django gives; cached as anonymous so a cache entry
		// never holds more than a bounded name (the middleware logs it).
		return identityEntry{expires: now.Add(ttl)}, nil
	}
	return identityEntry{
		caller: Caller{
			UserID: ans.Username,
			Staff:  ans.IsStaff || ans.IsSuperuser,
			Groups: boundGroups(ans.AuthGroups),
		},
		ok:      true,
		expires: now.Add(ttl),
	}, nil
}

// Bounds on the auth groups kept per cached caller. Dropping some can only
// lower a caller's tier, never raise it.
const (
	maxGroups     = 100
	maxGroupChars = 150
)

func boundGroups(groups []string) []string {
	out := groups[:0:0]
	for _, g := range groups {
		if len(out) == maxGroups {
			break
		}
		if utf8.RuneCountInString(g) <= maxGroupChars {
			out = append(out, g)
		}
	}
	return out
}

// decodeUserAnswer reads a /user/ answer with its keys matched exactly
// (encoding/json alone would take "IS_STAFF" for is_staff), the last of
// duplicates winning as in Python.
func decodeUserAnswer(r io.Reader) (userAnswer, error) {
	var raw map[string]json.RawMessage // exact keys; the last duplicate wins
	if err := json.NewDecoder(r).Decode(&raw); err != nil {
		return userAnswer{}, err
	}
	var ans userAnswer
	for k, dst := range map[string]any{"username": &ans.Username, "is_staff": &ans.IsStaff,
		"is_superuser": &ans.IsSuperuser, "auth_groups": &ans.AuthGroups} {
		if v, ok := raw[k]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return userAnswer{}, fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	return ans, nil
}

var _ Identifier = (*Upstream)(nil)
