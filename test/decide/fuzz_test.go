package decide

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/test/internal/e2e"
)

// The in-app differential fuzzer, test/bypass's for the gateway: a generator
// mutates heavy requests — paths and their escapes, the query, credentials
// (tokens, sessions, their spellings), bodies (rows, charsets, nesting deep
// enough for a RecursionError, padding past Django's upload limit, broken
// JSON), X-OCL-Event-Metadata (deep, huge, malformed, aware), request ids,
// Idempotency-Key (the decorated view's classifier sends it as the call's
// repeat_key: one the service can't take is a 400, and the call must be
// counted as the conservative call, never run uncounted), framing — and
// their timing (callers that hang up mid-body or trickle
// it, streamed answers, held calls), and sends each to the hosts, where
// capgate.django.CapacityMiddleware (or the decorated view) decides inside
// Django. Meanwhile a hog sends large lexical $match bodies, which hold the
// workers' GIL in DRF's JSON parser (the starvation attack). The invariant
// (checkInvariants): the views never run more heavy calls of a user at
// once than its limit, and every heavy run was counted by a decision
// service — whatever the mutation: an error in the classifier or the
// middleware is counted, not run, and the service answers every call
// with a decision or a 400 (a run that failed open, as after a 5xx,
// breaks the invariant: the service is up throughout).
//
// CI runs seed 1 for -decide.fuzz (15 s); a longer run takes a seed of its
// own (-decide.seed).
var (
	decideFuzzFor  = flag.Duration("decide.fuzz", 15*time.Second, "how long the in-app differential fuzzer runs (0: skip it)")
	decideFuzzSeed = flag.Uint64("decide.seed", 1, "the in-app differential fuzzer's seed")
)

const decideFuzzWorkers = 4

func TestInAppDifferentialFuzz(t *testing.T) {
	if *decideFuzzFor <= 0 {
		t.Skip("-decide.fuzz 0")
	}
	r := suite.Get(t)
	mark := r.mark(t)
	deadline := time.Now().Add(*decideFuzzFor)
	var mu sync.Mutex
	sent, byStatus := 0, map[int]int{}
	var wg sync.WaitGroup
	stopHog := make(chan struct{})
	var hogWG sync.WaitGroup
	hogWG.Go(func() { r.hog(t, stopHog) })
	for w := range decideFuzzWorkers {
		wg.Go(func() {
			m := &inAppMutator{r: r, rnd: rand.New(rand.NewPCG(*decideFuzzSeed, uint64(w)))}
			for i := 0; time.Now().Before(deadline); i++ {
				name := fmt.Sprintf("fuzz %d/%d/%d", *decideFuzzSeed, w, i)
				status := m.send(t, name)
				mu.Lock()
				sent++
				byStatus[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stopHog)
	hogWG.Wait()
	runs := r.runs(t, mark)
	t.Logf("seed %d: %d mutations, statuses %v, %d heavy runs", *decideFuzzSeed, sent, byStatus, len(runs))
	if byStatus[refused] == 0 {
		t.Errorf("no call was refused: the fuzzer never reached the limiter (statuses %v)", byStatus)
	}
	r.checkInvariants(t, mark, invariantOpts{})
}

// hog sends lexical $match calls with a ~2 MB body of rows until stop: not
// heavy (nothing is gated), but DRF's JSON parser holds the worker's GIL
// while it parses, starving the threads that wait for a decision.
func (r *rig) hog(t *testing.T, stop <-chan struct{}) {
	body := `{"rows":[` + strings.Repeat(`{"name":"fever","id":12345},`, 70000) + `{"name":"x"}]}`
	q := e2e.Request{Target: "/concepts/$match/", Body: body, Headers: []string{r.creds.Token("stan"), jsonCT}}
	raw := q.Raw()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := e2e.Send(t.Context(), r.hosts[i%2].addr, raw, 1); err != nil {
			t.Logf("hog: %v", err)
		}
	}
}

type inAppMutator struct {
	r   *rig
	rnd *rand.Rand
}

func (m *inAppMutator) pick(s ...string) string { return s[m.rnd.IntN(len(s))] }
func (m *inAppMutator) chance(p float64) bool   { return m.rnd.Float64() < p }

// send builds one mutated request and sends it to a host, with its
// timing; it returns the status read (0 when the caller hung up or no
// answer came).
func (m *inAppMutator) send(t *testing.T, name string) int {
	user := "pam"
	switch {
	case m.chance(0.2):
		user = "cora"
	case m.chance(0.05):
		user = "stan"
	}
	q := m.request(user, name)
	// cora's calls all go to host a: the hosts share her lane, but a
	// refusal of hers is what makes the limit visible.
	h := m.r.hosts[m.rnd.IntN(2)]
	raw := q.Raw()
	switch m.rnd.IntN(12) {
	case 0: // hang up mid-body: the view must not run, nothing may stay held
		cut := len(raw) - 1 - m.rnd.IntN(min(len(q.Body)+1, 64))
		m.hangUp(t, h.addr, raw[:max(cut, 1)])
		return 0
	case 1: // trickle: the headers, a pause, then the body
		return m.trickle(t, h.addr, raw)
	}
	replies, err := e2e.Send(t.Context(), h.addr, raw, 1)
	if err != nil || len(replies) == 0 {
		return 0
	}
	return replies[0].Status
}

func (m *inAppMutator) hangUp(t *testing.T, addr, part string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Logf("hang-up: %v", err)
		return
	}
	_, _ = io.WriteString(c, part)
	_ = c.Close()
}

func (m *inAppMutator) trickle(t *testing.T, addr, raw string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Logf("trickle: %v", err)
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	head, body, _ := strings.Cut(raw, "\r\n\r\n")
	_, _ = io.WriteString(c, head+"\r\n\r\n")
	// A pause between the headers and the body: timing, not a sleep
	// standing in for an event (the server has nothing to signal).
	time.Sleep(time.Duration(m.rnd.IntN(150)) * time.Millisecond)
	_, _ = io.WriteString(c, body)
	var status int
	if _, err := fmt.Fscanf(c, "HTTP/1.1 %d", &status); err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, c)
	return status
}

// request returns one mutated heavy request of user, tagged with the case
// name.
func (m *inAppMutator) request(user, name string) e2e.Request {
	var q e2e.Request
	decorated := m.chance(0.15)
	q.Target = m.path(decorated) + m.query()
	body, ct := m.body()
	q.Headers = append(q.Headers, m.credentials(user)...)
	q.Headers = append(q.Headers, ct...)
	q.Headers = append(q.Headers, m.extraHeaders(user == "pam")...)
	q.Body = body
	if m.chance(0.1) {
		q.NoLength = true
		q.Headers = append(q.Headers, "Transfer-Encoding: chunked")
		q.Body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	if user != "pam" {
		q.Headers = append(q.Headers, "X-Test-Hold-Ms: "+m.pick("0", "20", "80", "200"))
		if m.chance(0.2) {
			q.Headers = append(q.Headers, "X-Test-Stream: "+m.pick("2", "4"))
		}
	}
	q.Headers = append(q.Headers, "X-Test-Case: "+name)
	if m.chance(0.3) {
		m.rnd.Shuffle(len(q.Headers), func(i, j int) { q.Headers[i], q.Headers[j] = q.Headers[j], q.Headers[i] })
	}
	return q
}

func (m *inAppMutator) path(decorated bool) string {
	p := "/concepts/" + m.pick("$match", "%24match", "$rerank", "%24rerank") + m.pick("/", "")
	if decorated {
		p = "/v2" + p
	}
	if m.chance(0.05) {
		p = m.pick("/concepts/$match/.", "/concepts//$match/", "/Concepts/$match/", "/concepts/$match/x")
	}
	return p
}

func (m *inAppMutator) query() string {
	pairs := []string{m.pick("semantic=true", "semantic=True", "semantic=1", "semantic=TRUE", "reranker=true",
		"semantic=false&semantic=true", "semantic=true&semantic=false", "semantic=%74rue", "semantic", "")}
	if m.chance(0.2) {
		pairs = append(pairs, m.pick("reranker=1", "format=json", "semantic=true;x=1", "x=%ZZ"))
	}
	q := strings.Join(pairs, "&")
	if q == "" {
		return ""
	}
	return "?" + q
}

func (m *inAppMutator) credentials(user string) []string {
	switch m.rnd.IntN(8) {
	case 0:
		return m.r.creds.Session(user)
	case 1:
		return []string{"Authorization: " + m.pick("token", "TOKEN", "Token ") + " " + m.r.creds.Tokens[user]}
	case 2: // two credentials: DRF reads the first header
		return []string{m.r.creds.Token(user), "Authorization: Token " + m.r.creds.Tokens["stan"]}
	case 3:
		return append([]string{m.r.creds.Token(user)}, m.r.creds.Session("stan")...)
	}
	return []string{m.r.creds.Token(user)}
}

// body returns the JSON body, mutated, and its Content-Type lines.
func (m *inAppMutator) body() (string, []string) {
	rows := m.pick(`[{"name":"fever"}]`, `[1]`, `[1,2,3]`, `[]`, `[[]]`)
	var doc string
	switch m.rnd.IntN(9) {
	case 0:
		doc = `{"rows":` + rows + `,"q":"fever","ROWS":[]}`
	case 1:
		doc = `{"\u0072ows":` + rows + `,"q":"fever"}`
	case 2:
		// Deep enough for a RecursionError in DRF's parser.
		doc = `{"rows":[1],"q":"x","deep":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `}`
	case 3:
		doc = `{"rows":` + rows + `,"q":"fever","pad":"` + strings.Repeat("x", m.pick2(3<<20, 64<<10)) + `"}`
	case 4:
		doc = `{"rows":` + rows + `,"q":"fever"` // cut
	case 5:
		doc = `{"rows":[],"rows":` + rows + `,"q":5}`
	default:
		doc = `{"rows":` + rows + `,"q":"fever"}`
	}
	ct := "application/json"
	enc := doc
	switch m.rnd.IntN(10) {
	case 0:
		ct += "; charset=utf-16"
		enc = e2e.UTF16LE(doc, true)
	case 1:
		ct += `; charset="utf-32-be"`
		enc = e2e.UTF32BE(doc)
	case 2:
		ct += m.pick("; charset=latin-1", "; charset=utf-7", "; charset=cp500", "; charset=nonesuch")
	case 3:
		ct = m.pick("text/plain", "application/x-www-form-urlencoded", "application/JSON", "application/vnd.api+json")
	}
	return enc, []string{"Content-Type: " + ct}
}

func (m *inAppMutator) pick2(a, b int) int {
	if m.chance(0.3) {
		return a
	}
	return b
}

// extraHeaders: event metadata, request ids (reused ones only for paused
// callers, whose calls must all be refused: the invariants match runs to
// log lines by request id) and the like.
func (m *inAppMutator) extraHeaders(paused bool) []string {
	var h []string
	if m.chance(0.4) {
		h = append(h, "X-OCL-Event-Metadata: "+m.pick(
			strings.Repeat("[", 3000),
			strings.Repeat(`{"a":`, 500)+"1"+strings.Repeat("}", 500),
			`{"capacity_aware":true}`, `{"capacity_aware":"True"}`, `{"capacity_aware":1}`,
			`{"capacity_aware":true,"pad":"`+strings.Repeat("y", 9000)+`"}`,
			`not json`, `[1,2]`, `"\ud800"`, `{"capacity_aware":true}{"x":1}`))
	}
	if m.chance(0.1) {
		h = append(h, "X-OCL-Request-Source: "+strings.Repeat("s", m.rnd.IntN(200)))
	}
	if paused && m.chance(0.1) {
		h = append(h, "X-Request-ID: "+m.pick("reused-fuzz", fmt.Sprint(m.rnd.IntN(5))))
	}
	if m.chance(0.05) {
		h = append(h, fmt.Sprintf("X-Request-ID: fz-%x", m.rnd.Uint64()), "x-request-id: "+m.pick("", fmt.Sprintf("fz2-%x", m.rnd.Uint64())))
	}
	if m.chance(0.05) {
		h = append(h, m.pick("Connection: Authorization", "Expect: 100-continue", "X-Forwarded-User: stan", "Upgrade: h2c"))
	}
	if m.chance(0.3) {
		h = append(h, "Idempotency-Key: "+m.pick(fmt.Sprintf("k-%x", m.rnd.Uint64()), `"quoted-key"`, "a key with spaces",
			strings.Repeat("k", 300), "clé", `"`, fmt.Sprintf("k-%d", m.rnd.IntN(3))))
	}
	return h
}
