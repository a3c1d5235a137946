package bypass

import (
	"flag"
	"fmt"
	"github.com/capgate/capgate/test/internal/e2e"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The differential fuzzer: a generator mutates heavy requests (query pairs
// and escapes, ";" and "&", paths, repeated headers and their case,
// Connection tokens, cookies, Authorization spellings, JWTs, charsets,
// bodies, framing) and sends each through a gateway to the real Django
// upstream.
// The upstream records every heavy call it runs and for whom; the
// invariant (checkInvariants) is that it never runs one capgate did not
// count, whatever the mutation. Most mutations carry pam's credentials
// (preview, paused): any heavy run of hers is a bypass; cora (limit 1)
// calls too, held a little, so with the wait on her calls queue.
//
// CI runs a fixed seed for -bypass.fuzz (20 s) per wait setting, and as
// long again on the JWT path (the --identity jwt gateway, JWTs of every
// kind it can't verify, which the upstream runs) and on the idempotency
// path (a gateway with idempotency.mode auto, Idempotency-Keys from a small
// pool, good and malformed); bench/bypass-fuzz.sh runs
// it longer, with a seed of its own (-bypass.seed).
var (
	fuzzFor  = flag.Duration("bypass.fuzz", 20*time.Second, "how long the differential fuzzer runs per wait setting (0: skip it)")
	fuzzSeed = flag.Uint64("bypass.seed", 1, "the differential fuzzer's seed")
)

// fuzzWorkers is how many requests are in flight at once: few enough that
// the upstream's identity lookups never time out on this rig.
const fuzzWorkers = 4

func TestDifferentialFuzz(t *testing.T) {
	if *fuzzFor <= 0 {
		t.Skip("-bypass.fuzz 0")
	}
	r := suite.Get(t)
	// The rig's gateways have the wait of CAPGATE_BYPASS_WAIT; a gateway of
	// the fuzzer's own has the other setting, so every run covers both.
	rigWait, other := "on", "off"
	if waitSeconds() == "0" {
		rigWait, other = "off", "on"
	}
	t.Run("wait="+rigWait, func(t *testing.T) {
		mark := r.mark(t)
		n := r.fuzz(t, *fuzzSeed, *fuzzFor, []*gateway{r.gateways[gwUpstream], r.gateways[gwTokens], r.gateways[gwHeader]}, nil, false)
		t.Logf("seed %d: %d mutations, %d heavy runs upstream", *fuzzSeed, n, len(r.runs(t))-mark)
		r.checkInvariants(t, mark)
	})
	t.Run("wait="+other, func(t *testing.T) {
		g := r.otherWaitGateway(t)
		mark := r.mark(t)
		n := r.fuzz(t, *fuzzSeed+1, *fuzzFor, []*gateway{g}, nil, false)
		t.Logf("seed %d: %d mutations, %d heavy runs upstream", *fuzzSeed+1, n, len(r.runs(t))-mark)
		r.checkInvariants(t, mark)
	})
	// The JWT path: the --identity jwt gateway, with JWTs (good ones and
	// every kind it can't verify, which the upstream runs) mutated.
	t.Run("jwt", func(t *testing.T) {
		g, k := r.jwtGateway(t)
		mark := r.mark(t)
		n := r.fuzz(t, *fuzzSeed+2, *fuzzFor, []*gateway{g}, k.pool(t), false)
		t.Logf("seed %d: %d mutations, %d heavy runs upstream", *fuzzSeed+2, n, len(r.runs(t))-mark)
		r.checkInvariants(t, mark)
	})
	// The idempotency path: a gateway with idempotency.mode auto (every
	// call keyed, by its Idempotency-Key or by the request), calls with
	// keys from a small pool (good, malformed, repeated), so repeats join
	// calls running, replay kept answers and reuse keys: none may run a
	// call uncounted or over a limit.
	t.Run("idempotency", func(t *testing.T) {
		g := r.idempotencyGateway(t)
		mark := r.mark(t)
		n := r.fuzz(t, *fuzzSeed+3, *fuzzFor, []*gateway{g}, nil, true)
		t.Logf("seed %d: %d mutations, %d heavy runs upstream", *fuzzSeed+3, n, len(r.runs(t))-mark)
		r.checkInvariants(t, mark)
	})
}

// idempotencyGateway starts (once) a gateway like the upstream one, with
// idempotency.mode auto.
func (r *rig) idempotencyGateway(t *testing.T) *gateway {
	t.Helper()
	const id = "upstream-idempotency"
	if g := r.gateways[id]; g != nil {
		return g
	}
	g, err := r.startGateway(t.Context(), id, append(slices.Clone(configArgs), "idempotency.mode=auto"),
		"--max-body-bytes", fmt.Sprint(maxBodyBytes), "--identity", "upstream")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fuzz sends mutated requests to gws from fuzzWorkers workers for d and
// returns how many it sent. Worker w draws from its own stream of seed, so
// a seed gives the same mutations (their interleaving aside). cora's calls
// all go to gws[0]: each gateway counts her limit in lanes of its own.
// With jwt (a pool of tokens per user, jwtKit.pool) the credentials are
// JWTs; without, DRF tokens and sessions.
func (r *rig) fuzz(t *testing.T, seed uint64, d time.Duration, gws []*gateway, jwt map[string][]string, idem bool) int {
	t.Helper()
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	sent := 0
	var wg sync.WaitGroup
	for w := range fuzzWorkers {
		wg.Go(func() {
			m := &mutator{r: r, rnd: rand.New(rand.NewPCG(seed, uint64(w))), jwt: jwt, idem: idem}
			for i := 0; time.Now().Before(deadline); i++ {
				q, user := m.request(fmt.Sprintf("fuzz %d/%d/%d", seed, w, i))
				g := gws[m.rnd.IntN(len(gws))]
				if user != "pam" {
					g = gws[0]
				}
				e2e.Statuses(t, g.addr, q.Raw(), 1)
				mu.Lock()
				sent++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sent
}

// otherWaitGateway starts (once) a gateway like the upstream one but with
// the other wait setting than the rig's (CAPGATE_BYPASS_WAIT).
func (r *rig) otherWaitGateway(t *testing.T) *gateway {
	t.Helper()
	const id = "upstream-other-wait"
	if g := r.gateways[id]; g != nil {
		return g
	}
	wait := "wait.max_seconds=0"
	if waitSeconds() == "0" {
		wait = "wait.max_seconds=2"
	}
	g, err := r.startGateway(t.Context(), id, append(slices.Clone(configArgs), wait),
		"--max-body-bytes", fmt.Sprint(maxBodyBytes), "--identity", "upstream")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// mutator builds mutated heavy requests.
type mutator struct {
	r   *rig
	rnd *rand.Rand
	jwt map[string][]string // per user, JWTs to send (jwtCredentials); nil: DRF credentials
	// idem adds Idempotency-Key headers from a small pool (idempotencyKey).
	idem bool
}

// idempotencyKey returns Idempotency-Key lines: mostly one of a few keys
// (so calls repeat each other, with the same request or another), now and
// then none, a malformed one or two.
func (m *mutator) idempotencyKey() []string {
	switch {
	case m.chance(0.15):
		return nil // keyed by the request (mode auto)
	case m.chance(0.05):
		return []string{"Idempotency-Key: " + m.pick("", "\"\"", strings.Repeat("k", 300), "k\u00e9")}
	case m.chance(0.05):
		return []string{"Idempotency-Key: k1", "idempotency-key: k2"}
	}
	k := fmt.Sprintf("k%d", m.rnd.IntN(4))
	if m.chance(0.3) {
		k = `"` + k + `"`
	}
	return []string{m.pick("Idempotency-Key: ", "idempotency-key: ", "IDEMPOTENCY-KEY:") + k,
		"X-Stainless-Retry-Count: " + m.pick("0", "1", "2")}
}

func (m *mutator) pick(s ...string) string { return s[m.rnd.IntN(len(s))] }
func (m *mutator) chance(p float64) bool   { return m.rnd.Float64() < p }

// request returns one mutated heavy request tagged with the case name,
// and whose credentials it carries: pam's (paused) mostly, cora's (limit 1,
// held a little, so her calls queue when the wait is on) now and then.
func (m *mutator) request(name string) (e2e.Request, string) {
	user := "pam"
	if m.chance(0.2) {
		user = "cora"
	}
	var q e2e.Request
	q.Method = "POST"
	if m.chance(0.1) {
		q.Method = m.pick("post", "Post", "pOST")
	}
	rerank := m.chance(0.25)
	q.Target = m.path(rerank) + m.query(rerank)
	body, ct := m.body(rerank)
	if m.jwt != nil {
		q.Headers = append(q.Headers, m.jwtCredentials(user)...)
	} else {
		q.Headers = append(q.Headers, m.credentials(user)...)
	}
	q.Headers = append(q.Headers, ct...)
	q.Headers = append(q.Headers, m.extraHeaders(user == "pam")...)
	if m.idem {
		q.Headers = append(q.Headers, m.idempotencyKey()...)
	}
	q.Body = body
	if m.chance(0.1) {
		q.NoLength = true
		q.Headers = append(q.Headers, "Transfer-Encoding: chunked")
		q.Body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	if user == "cora" {
		q.Headers = append(q.Headers, "X-Test-Hold-Ms: "+m.pick("20", "50", "150"))
	}
	q.Headers = append(q.Headers, "X-Test-Case: "+name)
	// Shuffle the header lines: order matters to "first" and "last" rules.
	if m.chance(0.3) {
		m.rnd.Shuffle(len(q.Headers), func(i, j int) { q.Headers[i], q.Headers[j] = q.Headers[j], q.Headers[i] })
	}
	return q, user
}

func (m *mutator) path(rerank bool) string {
	ep := "$match"
	if rerank {
		ep = "$rerank"
	}
	if m.chance(0.2) {
		ep = strings.Replace(ep, "$", "%24", 1)
	}
	slash := "/"
	if m.chance(0.15) {
		slash = m.pick("", "//", "%2F")
	}
	prefix := "/concepts/"
	if m.chance(0.05) {
		prefix = m.pick("//concepts/", "/./concepts/", "/x/../concepts/", "/concepts%2F")
	}
	return prefix + ep + slash
}

// query builds the query: truthy and falsy pairs, junk, escapes, separators.
func (m *mutator) query(rerank bool) string {
	var pairs []string
	n := 1 + m.rnd.IntN(4)
	for range n {
		key := m.pick("semantic", "reranker", "semantic", "%73emantic", "Semantic", "semantic ", "x", "q")
		val := m.pick("true", "True", "TRUE", "1", "false", "0", "", "%zz", "%G0", ";", "true;x", "tru%65",
			"%74rue", "true+", "%20true", "1%00", "\u00e9", "%C3%A9", "%", "%2")
		switch m.rnd.IntN(6) {
		case 0:
			pairs = append(pairs, key) // no "="
		case 1:
			pairs = append(pairs, key+"="+val+"="+m.pick("1", "true"))
		default:
			pairs = append(pairs, key+"="+val)
		}
	}
	if !rerank && m.chance(0.6) {
		// Mostly a truthy flag somewhere, so the call is heavy to Django.
		at := m.rnd.IntN(len(pairs) + 1)
		pairs = append(pairs[:at], append([]string{m.pick("semantic=true", "reranker=1", "semantic=True")}, pairs[at:]...)...)
	}
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(m.pick("&", "&", "&", ";", "&&", "&;"))
		}
		b.WriteString(p)
	}
	if m.chance(0.05) {
		b.WriteString("#" + m.pick("", "&semantic=false", "x"))
	}
	return "?" + b.String()
}

// credentials are pam's (or cora's) token or session, mutated.
func (m *mutator) credentials(user string) []string {
	tok := m.r.creds.Tokens[user]
	sess := m.r.creds.Sessions[user]
	csrf := m.r.creds.CSRF
	var h []string
	useToken := m.chance(0.6)
	if useToken {
		scheme := m.pick("Token ", "Token ", "token ", "Token\t", "TOKEN  ", "Bearer ")
		auth := scheme + tok
		if m.chance(0.1) {
			auth += m.pick(" ", "\t", ",", " x")
		}
		name := m.pick("Authorization", "authorization", "AUTHORIZATION")
		if m.chance(0.15) {
			h = append(h, name+": "+m.pick("", " ", "Basic eDp5", "Token nope"))
		}
		h = append(h, name+": "+auth)
		if m.chance(0.1) {
			h = append(h, name+": "+m.pick("", "Token nope"))
		}
	} else if m.chance(0.1) {
		h = append(h, "Authorization: "+m.pick("Basic eDp5", "Bearer", "Token"))
	}
	if !useToken || m.chance(0.3) {
		cookies := []string{"sessionid=" + sess, "csrftoken=" + csrf}
		for range m.rnd.IntN(3) {
			cookies = append(cookies, fmt.Sprintf("junk%d=%d", m.rnd.IntN(1e6), m.rnd.IntN(1e6)))
		}
		if m.chance(0.2) {
			cookies = append(cookies, "sessionid="+m.pick("junk", "", `"`+sess+`"`))
		}
		if m.chance(0.1) {
			cookies[0] = m.pick(" sessionid ="+sess, "sessionid= "+sess, "\xa0sessionid="+sess)
		}
		m.rnd.Shuffle(len(cookies), func(i, j int) { cookies[i], cookies[j] = cookies[j], cookies[i] })
		name := m.pick("Cookie", "cookie", "COOKIE")
		if m.chance(0.3) {
			// Split over lines, as gunicorn joins them (","): a blank
			// first line, or a ";" leading the next.
			cut := m.rnd.IntN(len(cookies) + 1)
			h = append(h, name+": "+m.pick("", " ", strings.Join(cookies[:cut], "; ")),
				name+": "+m.pick("", ";", "; ")+strings.Join(cookies[cut:], "; "))
		} else {
			h = append(h, name+": "+strings.Join(cookies, m.pick("; ", ";", " ; ")))
		}
		h = append(h, m.pick("X-CSRFToken", "x-csrftoken")+": "+csrf)
	}
	return h
}

// body returns the JSON body, mutated, and its Content-Type lines.
func (m *mutator) body(rerank bool) (string, []string) {
	rows := m.pick(`[{"name":"fever"}]`, `[1]`, `[1,2,3]`, `[]`, `[[]]`)
	var doc string
	switch m.rnd.IntN(6) {
	case 0:
		doc = `{"rows":` + rows + `,"ROWS":[]}`
	case 1:
		doc = `{"\u0072ows":` + rows + `}`
	case 2:
		doc = `{"rows":[],"rows":` + rows + `}`
	case 3:
		doc = ` { "rows" : ` + rows + ` } `
	default:
		doc = `{"rows":` + rows + `}`
	}
	if rerank {
		q := m.pick(`"fever"`, `""`, `5`, `0`, `null`, `[0]`, `{}`)
		doc = strings.TrimSuffix(strings.TrimSpace(doc), "}") + `,"q":` + q + m.pick("", `,"Q":""`) + "}"
	}
	ct := "application/json"
	enc := doc
	switch m.rnd.IntN(10) {
	case 0:
		ct += "; charset=utf-16"
		enc = e2e.UTF16LE(doc, true)
	case 1:
		ct += "; charset=UTF-16LE"
		enc = e2e.UTF16LE(doc, false)
	case 2:
		ct += `; charset="utf-32-be"`
		enc = e2e.UTF32BE(doc)
	case 3:
		ct += "; charset=utf-8-sig"
		enc = "\xef\xbb\xbf" + doc
	case 4:
		ct += m.pick("; charset=latin-1", "; charset=utf-7", `; charset="utf-16;x"`, `; x="a;charset=utf-16"`, "; charset=cp500")
	}
	lines := []string{"Content-Type: " + ct}
	if m.chance(0.1) {
		lines = append([]string{"Content-Type: " + m.pick("application/json", "text/plain", "application/json; charset=utf-16")}, lines...)
	}
	if m.chance(0.05) {
		lines = append(lines, "Content-Encoding: "+m.pick("gzip", "identity", ""))
	}
	return enc, lines
}

// extraHeaders adds Connection tokens, request ids (reused ones only for
// paused callers, whose calls must all be refused: the invariants match
// runs to log lines by request id) and the like.
func (m *mutator) extraHeaders(paused bool) []string {
	var h []string
	if m.chance(0.2) {
		h = append(h, "Connection: "+m.pick("Authorization", "Cookie", "keep-alive, Cookie", "X-Request-ID",
			"X-Test-Hold-Ms", "Content-Type", "X-Forwarded-For", "close", "Upgrade", "X-CSRFToken", "authorization "))
	}
	if paused && m.chance(0.1) {
		h = append(h, "X-Request-ID: "+m.pick("reused-fuzz", url.QueryEscape(fmt.Sprint(m.rnd.IntN(5)))))
	}
	if m.chance(0.05) {
		// Two request ids: gunicorn joins them, and so does capgate.
		id := m.rnd.Uint64()
		h = append(h, fmt.Sprintf("X-Request-ID: fz-%x", id), fmt.Sprintf("x-request-id: %s", m.pick("", fmt.Sprintf("fz2-%x", id))))
	}
	if m.chance(0.05) {
		h = append(h, m.pick("X_Capgate_User: stan", "X-Capgate-User: stan", "SCRIPT_NAME: /x", "Upgrade: h2c", "Expect: 100-continue"))
	}
	return h
}
