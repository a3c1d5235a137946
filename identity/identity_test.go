package identity_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/mock"
)

func newFakeClock() *mock.Clock { return mock.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// userAPI is a fake OCL /user/ endpoint: it knows tokens, answers 401 for
// others, and counts lookups per Authorization header.
type userAPI struct {
	*httptest.Server
	mu     sync.Mutex
	calls  map[string]int
	status int // when non-zero, answer this status to everyone
	users  map[string]string
}

func newUserAPI(t *testing.T) *userAPI {
	u := &userAPI{calls: map[string]int{}, users: map[string]string{
		"Token alice":  `{"username":"alice","is_staff":false,"is_superuser":false,"auth_groups":["core_user"]}`,
		"Token root":   `{"username":"root","is_staff":false,"is_superuser":true,"auth_groups":[]}`,
		"Token bob":    `{"username":"bob","is_staff":false,"auth_groups":null}`,
		"Token nobody": `{"is_staff":true}`,
	}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/user/" || r.URL.RawQuery != "includeAuthGroups=true" || r.Method != "GET" {
			t.Errorf("lookup %s %s", r.Method, r.URL)
		}
		auth := r.Header.Get("Authorization")
		u.mu.Lock()
		u.calls[auth]++
		status := u.status
		u.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		body, ok := u.users[auth]
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail":"Invalid token."}`)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *userAPI) Calls(auth string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[auth]
}

func (u *userAPI) SetStatus(s int) {
	u.mu.Lock()
	u.status = s
	u.mu.Unlock()
}

func requestWithAuth(auth string) *http.Request {
	r := httptest.NewRequest("POST", "/concepts/$match/", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	return r
}

func mustUpstreamIdentity(t *testing.T, api *userAPI, clock *mock.Clock) *identity.Upstream {
	t.Helper()
	id, err := identity.NewUpstream(api.URL + "/api")
	if err != nil {
		t.Fatal(err)
	}
	id.Now = clock.Now
	return id
}

func TestUpstreamIdentity(t *testing.T) {
	api := newUserAPI(t)
	clock := newFakeClock()
	id := mustUpstreamIdentity(t, api, clock)
	ctx := t.Context()

	check := func(auth string, want identity.Caller, wantOK bool) {
		t.Helper()
		got, ok, err := id.Identify(ctx, requestWithAuth(auth))
		if err != nil || ok != wantOK || !reflect.DeepEqual(got, want) {
			t.Errorf("Identify(%q) = %+v, %v, %v; want %+v, %v, nil", auth, got, ok, err, want, wantOK)
		}
	}
	alice := identity.Caller{UserID: "alice", Groups: []string{"core_user"}}

	check("", identity.Caller{}, false)
	check("Token alice", alice, true)
	check("Token root", identity.Caller{UserID: "root", Staff: true, Groups: []string{}}, true)
	check("Token bob", identity.Caller{UserID: "bob"}, true)
	if n := api.Calls(""); n != 0 {
		t.Errorf("a request without credentials made %d lookups", n)
	}

	// Cached for 60 s per credential.
	clock.Advance(59 * time.Second)
	check("Token alice", alice, true)
	if n := api.Calls("Token alice"); n != 1 {
		t.Errorf("lookups for alice within a minute = %d, want 1", n)
	}
	clock.Advance(time.Second)
	check("Token alice", alice, true)
	if n := api.Calls("Token alice"); n != 2 {
		t.Errorf("lookups for alice after a minute = %d, want 2", n)
	}

	// A 401 is anonymous, cached briefly.
	check("Token mallory", identity.Caller{}, false)
	clock.Advance(4 * time.Second)
	check("Token mallory", identity.Caller{}, false)
	if n := api.Calls("Token mallory"); n != 1 {
		t.Errorf("lookups for a rejected token within 4 s = %d, want 1", n)
	}
	clock.Advance(time.Second)
	check("Token mallory", identity.Caller{}, false)
	if n := api.Calls("Token mallory"); n != 2 {
		t.Errorf("lookups for a rejected token after 5 s = %d, want 2", n)
	}
}

func TestUpstreamIdentityFailures(t *testing.T) {
	api := newUserAPI(t)
	id := mustUpstreamIdentity(t, api, newFakeClock())
	ctx := t.Context()

	// No username: an error, not a caller.
	if _, ok, err := id.Identify(ctx, requestWithAuth("Token nobody")); ok || !errors.Is(err, identity.ErrLookup) {
		t.Errorf("no username: ok=%v err=%v; want ErrLookup", ok, err)
	}

	api.SetStatus(http.StatusBadGateway)
	for i := range 2 {
		_, ok, err := id.Identify(ctx, requestWithAuth("Token bob"))
		if ok || !errors.Is(err, identity.ErrLookup) {
			t.Errorf("502: ok=%v err=%v; want ErrLookup", ok, err)
		}
		if err != nil && strings.Contains(err.Error(), "bob") {
			t.Errorf("the error shows the credential: %v", err)
		}
		if n := api.Calls("Token bob"); n != i+1 {
			t.Errorf("failures are cached: %d lookups after %d tries", n, i+1)
		}
	}

	// Once the API answers again, so does the resolver.
	api.SetStatus(0)
	if c, ok, err := id.Identify(ctx, requestWithAuth("Token bob")); !ok || err != nil || c.UserID != "bob" {
		t.Errorf("after recovery: %+v, %v, %v", c, ok, err)
	}

	// An API that is down.
	down, err := identity.NewUpstream("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := down.Identify(ctx, requestWithAuth("Token bob")); ok || err == nil {
		t.Errorf("API down: ok=%v err=%v; want an error", ok, err)
	}
}

func TestUpstreamIdentityTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	id, err := identity.NewUpstream(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	id.Timeout = 50 * time.Millisecond
	_, ok, err := id.Identify(t.Context(), requestWithAuth("Token slow"))
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ok=%v err=%v; want a deadline error", ok, err)
	}
}

// roundTripFunc lets a test serve lookups in-process, inside a synctest
// bubble.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestUpstreamIdentitySharesConcurrentLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		answer := make(chan struct{})
		id, err := identity.NewUpstream("http://api.test")
		if err != nil {
			t.Fatal(err)
		}
		id.Client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			<-answer
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"username":"alice"}`))}, nil
		})}

		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				c, ok, err := id.Identify(t.Context(), requestWithAuth("Token alice"))
				if !ok || err != nil || c.UserID != "alice" {
					t.Errorf("Identify = %+v, %v, %v", c, ok, err)
				}
			})
		}
		synctest.Wait() // every caller is waiting on the one lookup
		close(answer)
		wg.Wait()
		if calls != 1 {
			t.Errorf("8 concurrent callers made %d lookups, want 1", calls)
		}

		// A waiter whose client goes away stops waiting.
		answer = make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 2)
		go func() { _, _, err := id.Identify(t.Context(), requestWithAuth("Token bob")); done <- err }()
		synctest.Wait()
		go func() { _, _, err := id.Identify(ctx, requestWithAuth("Token bob")); done <- err }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v; want context.Canceled", err)
		}
		close(answer)
		if err := <-done; err != nil {
			t.Errorf("leader: %v", err)
		}
	})
}

func TestUpstreamIdentityCacheIsBounded(t *testing.T) {
	api := newUserAPI(t)
	id := mustUpstreamIdentity(t, api, newFakeClock())
	id.CacheEntries = 2
	for _, auth := range []string{"Token alice", "Token bob", "Token alice", "Token root", "Token alice", "Token bob"} {
		if _, _, err := id.Identify(t.Context(), requestWithAuth(auth)); err != nil {
			t.Fatal(err)
		}
	}
	// alice stays (recently used); bob is evicted by root, then looked up again.
	if a, b := api.Calls("Token alice"), api.Calls("Token bob"); a != 1 || b != 2 {
		t.Errorf("lookups alice=%d bob=%d; want 1 and 2", a, b)
	}
}

func TestNewUpstreamIdentityRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "api:8000", "ftp://x/", "http://", "://x"} {
		if _, err := identity.NewUpstream(u); err == nil {
			t.Errorf("NewUpstream(%q) accepted", u)
		}
	}
}

func TestHeaderIdentity(t *testing.T) {
	id, err := identity.NewHeader([]string{"10.0.0.0/8", " 192.168.1.7 ", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		remote, user, groups, staff string
		want                        identity.Caller
		ok                          bool
	}{
		{remote: "10.1.2.3:5000", user: "alice", groups: "core_user, early_access,,", want: identity.Caller{UserID: "alice", Groups: []string{"core_user", "early_access"}}, ok: true},
		{remote: "192.168.1.7:1", user: "root", staff: "True", want: identity.Caller{UserID: "root", Staff: true}, ok: true},
		{remote: "[::ffff:10.0.0.1]:80", user: "bob", staff: "1", want: identity.Caller{UserID: "bob", Staff: true}, ok: true},
		{remote: "[::1]:80", user: "carol", staff: "no", want: identity.Caller{UserID: "carol"}, ok: true},
		{remote: "192.168.1.8:1", user: "root", staff: "true"},
		{remote: "11.0.0.1:1", user: "alice"},
		{remote: "10.1.2.3:5000"},
		{remote: "garbage", user: "alice"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		for k, v := range map[string]string{"X-Capgate-User": tt.user, "X-Capgate-Groups": tt.groups, "X-Capgate-Staff": tt.staff} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		got, ok, err := id.Identify(t.Context(), r)
		if err != nil || ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %s: %+v, %v, %v; want %+v, %v", tt.remote, tt.user, got, ok, err, tt.want, tt.ok)
		}
	}
	if _, err := identity.NewHeader([]string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad CIDR was accepted")
	}
}

func TestTokenIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	err := os.WriteFile(path, []byte(`[
		{"token": "t-alice", "username": "alice", "is_staff": false, "auth_groups": ["core_user"]},
		{"token": "t-root", "username": "root", "is_staff": true}
	]`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		auth string
		want identity.Caller
		ok   bool
	}{
		{"Token t-alice", identity.Caller{UserID: "alice", Groups: []string{"core_user"}}, true},
		{"Bearer t-root", identity.Caller{UserID: "root", Staff: true}, true},
		{"bearer  t-root ", identity.Caller{UserID: "root", Staff: true}, true},
		{"Basic t-root", identity.Caller{}, false},
		{"Token t-bob", identity.Caller{}, false},
		{"Token", identity.Caller{}, false},
		{"", identity.Caller{}, false},
	}
	for _, tt := range tests {
		got, ok, err := id.Identify(t.Context(), requestWithAuth(tt.auth))
		if err != nil || ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: %+v, %v, %v; want %+v, %v", tt.auth, got, ok, err, tt.want, tt.ok)
		}
	}

	for i, bad := range []string{
		`{"token":"a","username":"b"}`,
		`[{"token":"a"}]`,
		`[{"token":"a","username":"b"},{"token":"a","username":"c"}]`,
		`[{"token":"a","username":"b","role":"x"}]`,
		`[] []`,
	} {
		p := filepath.Join(t.TempDir(), fmt.Sprintf("bad%d.json", i))
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := identity.LoadTokens(p); err == nil {
			t.Errorf("LoadTokens accepted %s", bad)
		}
	}
	if _, err := identity.LoadTokens(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v; want ErrNotExist", err)
	}
}

// TestParseTrustedProxies: one reading of --trusted-proxies for the
// gateway's X-Forwarded-* trust and Header's, IPv4-mapped
// prefixes unmapped and every prefix masked (peers are matched unmapped).
func TestParseTrustedProxies(t *testing.T) {
	got, err := identity.ParseTrustedProxies([]string{"10.1.2.3/8", " ::ffff:172.16.0.0/108 ", "", "192.168.1.5", "::1", "::ffff:10.9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.1.5/32"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.9.9.9/32")}
	if !slices.Equal(got, want) {
		t.Errorf("ParseTrustedProxies = %v, want %v", got, want)
	}
	h, err := identity.NewHeader([]string{"::ffff:172.16.0.0/108"})
	if err != nil || !slices.Equal(h.Trusted, want[1:2]) {
		t.Errorf("NewHeader trusts %v (%v), want %v as the gateway does", h.Trusted, err, want[1:2])
	}
	if _, err := identity.ParseTrustedProxies([]string{"10.0.0.0/8", "proxy.internal"}); err == nil || !strings.Contains(err.Error(), "proxy.internal") {
		t.Errorf("a name: err = %v, want one naming it", err)
	}
}

func TestReadTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(`[{"token":"t-a","username":"a","auth_groups":["g"]},{"token":"t-b","username":"b","is_staff":true}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := identity.ReadTokens(path)
	want := []identity.TokenEntry{{Token: "t-a", Username: "a", AuthGroups: []string{"g"}}, {Token: "t-b", Username: "b", IsStaff: true}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadTokens = %+v, %v; want %+v", got, err, want)
	}
	for i, bad := range []string{`{"token":"a","username":"b"}`, `[{"token":"a","username":"b","role":"x"}]`, `[] []`, `[`} {
		p := filepath.Join(t.TempDir(), fmt.Sprintf("bad%d.json", i))
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := identity.ReadTokens(p); err == nil {
			t.Errorf("ReadTokens accepted %s", bad)
		}
	}
}
