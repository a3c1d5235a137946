package http

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

	"github.com/capgate/capgate"
)

// Defaults of UpstreamIdentity.
const (
	DefaultIdentityTTL          = 60 * time.Second // how long a caller is cached
	DefaultUnauthorizedTTL      = 5 * time.Second  // how long a 401 is cached
	DefaultIdentityTimeout      = time.Second      // the longest one lookup may take
	DefaultIdentityCacheEntries = 10000            // credentials cached at most
)

// maxUserBody bounds what is read of a /user/ answer.
const maxUserBody = 1 << 20

// ErrLookup is wrapped by the error of a lookup that failed: the API
// answered with an unexpected status or an unreadable body.
var ErrLookup = errors.New("user lookup failed")

// UpstreamIdentity learns who calls by asking the API: GET
// <upstream>/user/?includeAuthGroups=true with the caller's Authorization
// header (SPEC §10, --identity upstream). It uses the answer's username,
// is_staff, is_superuser and auth_groups.
//
// Answers are cached per credential, keyed by the SHA-256 of the
// Authorization header (never the raw token), for TTL; the cache holds at
// most CacheEntries credentials and evicts the least recently used.
// Concurrent lookups of one credential share one request. A 401 or 403 means
// the credential is not valid: the caller is anonymous (the API answers the
// call itself), and that is cached for UnauthorizedTTL. A request without an
// Authorization header is anonymous and triggers no lookup. A lookup that
// fails or takes longer than Timeout returns an error; it is not cached.
//
// Create one with NewUpstreamIdentity and set fields before first use. Safe
// for concurrent use.
type UpstreamIdentity struct {
	// Client makes the lookups. Default: a client on http.DefaultTransport.
	Client *http.Client
	// TTL is how long a caller is cached. Default DefaultIdentityTTL.
	TTL time.Duration
	// UnauthorizedTTL is how long a rejected credential is cached. Default
	// DefaultUnauthorizedTTL.
	UnauthorizedTTL time.Duration
	// Timeout bounds one lookup. Default DefaultIdentityTimeout.
	Timeout time.Duration
	// CacheEntries bounds the cache. Default DefaultIdentityCacheEntries.
	CacheEntries int
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

// NewUpstreamIdentity returns a resolver that asks the API at upstream (an
// absolute http or https URL, possibly with a path) with the defaults. It
// returns an error for a URL that is not absolute http(s).
func NewUpstreamIdentity(upstream string) (*UpstreamIdentity, error) {
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
	return &UpstreamIdentity{url: u.String()}, nil
}

func (u *UpstreamIdentity) init() {
	u.once.Do(func() {
		n := u.CacheEntries
		if n <= 0 {
			n = DefaultIdentityCacheEntries
		}
		u.cache = newIdentityCache(n)
		u.flights = make(map[credKey]*flight)
	})
}

func (u *UpstreamIdentity) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

// Identify implements capgate.Identifier.
func (u *UpstreamIdentity) Identify(ctx context.Context, r *http.Request) (capgate.Caller, bool, error) {
	auth := r.Header.Get("Authorization")
	if strings.TrimSpace(auth) == "" {
		return capgate.Caller{}, false, nil
	}
	u.init()
	k := credKey(sha256.Sum256([]byte(auth)))
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
			return capgate.Caller{}, false, fmt.Errorf("identify caller: %w", ctx.Err())
		}
	}

	// The lookup is shared, so it doesn't end when this request's client
	// goes away; Timeout bounds it.
	f.e, f.err = u.lookup(context.WithoutCancel(ctx), auth)
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

// userAnswer is the part of the API's /user/ answer used.
type userAnswer struct {
	Username    string   `json:"username"`
	IsStaff     bool     `json:"is_staff"`
	IsSuperuser bool     `json:"is_superuser"`
	AuthGroups  []string `json:"auth_groups"`
}

// lookup asks the API who auth is.
func (u *UpstreamIdentity) lookup(ctx context.Context, auth string) (identityEntry, error) {
	timeout := u.Timeout
	if timeout <= 0 {
		timeout = DefaultIdentityTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return identityEntry{}, fmt.Errorf("identify caller: %w", err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Accept", "application/json")
	client := u.Client
	if client == nil {
		client = http.DefaultClient
	}
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
			ttl = DefaultUnauthorizedTTL
		}
		return identityEntry{expires: now.Add(ttl)}, nil
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUserBody))
		return identityEntry{}, fmt.Errorf("identify caller: %w: GET /user/ answered %d", ErrLookup, resp.StatusCode)
	}

	var ans userAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxUserBody)).Decode(&ans); err != nil {
		return identityEntry{}, fmt.Errorf("identify caller: %w: decode /user/: %w", ErrLookup, err)
	}
	if ans.Username == "" {
		return identityEntry{}, fmt.Errorf("identify caller: %w: /user/ gave no username", ErrLookup)
	}
	ttl := u.TTL
	if ttl <= 0 {
		ttl = DefaultIdentityTTL
	}
	return identityEntry{
		caller: capgate.Caller{
			UserID: ans.Username,
			Staff:  ans.IsStaff || ans.IsSuperuser,
			Groups: ans.AuthGroups,
		},
		ok:      true,
		expires: now.Add(ttl),
	}, nil
}

var _ capgate.Identifier = (*UpstreamIdentity)(nil)
