package decide

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/journal"
)

// DefaultMaxTasks is how many task ids other than the gate's own a Server
// keeps a gate for.
const DefaultMaxTasks = 64

// DefaultMaxWaiting is how many calls of one API task may wait in the
// service at once unless told otherwise: each holds one of the app's
// workers while it waits, and with 2 an app of 4 sync workers keeps one
// for the user's running call and one free for everything else
// (docs/PROTOCOL.md, "How many may wait"; measured in docs/BENCHMARKS.md).
const DefaultMaxWaiting = 2

// HeaderWaitSeconds is sent, with the response's headers ahead of the
// decision, when the call may wait: the most seconds it may (the config's
// wait.max_seconds). A client allows that long beyond its own timeout for
// the decision line.
const HeaderWaitSeconds = "Capgate-Wait-Seconds"

// Decision is the first line of the answer to POST /v1/calls.
type Decision struct {
	// ID names the call for POST /v1/calls/{id}/release.
	ID string `json:"id"`
	// Decision is the gate's: admitted, shadow-refused, refused,
	// unavailable, or off (mode off: nothing counted); for a call with a
	// repeat_key also joined (it repeats a call running) or reused.
	Decision string `json:"decision"`
	// Held reports whether the call holds a place in a lane: the response
	// then stays open until the app closes it or releases the call.
	Held bool `json:"held"`
	// Status is 429 for a refused call, 422 for a reused repeat_key (the
	// app answers it with Headers and Body, never running the view), else
	// 0.
	Status int `json:"status,omitempty"`
	// Headers are for the app's response, whatever the decision.
	Headers map[string]string `json:"headers"`
	// Body is the 429's JSON body, only for a refused call (the 422's for
	// a reused repeat_key).
	Body json.RawMessage `json:"body,omitempty"`
	// MaxHoldSeconds bounds how long the service holds the call (for a
	// joined call: waits for the call it repeats).
	MaxHoldSeconds int `json:"max_hold_seconds,omitempty"`
	// DedupOf is the request_id of the running call a joined call
	// repeats.
	DedupOf string `json:"dedup_of,omitempty"`
}

// End is the line that ends a held call's answer when the service ends it
// (not when the app closes the connection: nobody would read it).
type End struct {
	// Released is release, max_hold or shutdown; for a joined call also
	// finished (the call it repeats ended), store_failed or waiting_full
	// (too many calls wait, joiners counted).
	Released string `json:"released"`
}

// Server answers the decision protocol (docs/PROTOCOL.md) over a Gate.
//
//   - POST /v1/calls decides one call and answers one JSON line at once
//     (Decision), after the fair wait if the call waits. A call that holds
//     a place keeps the response open; the place is given back when the
//     client closes the connection, releases it (POST
//     /v1/calls/{id}/release), max_hold_seconds pass, or the server shuts
//     down. A client that leaves while it waits leaves the queue.
//   - POST /v1/calls/{id}/release ends a held call: 204, or 404 when no
//     call of that id is held. Its optional body {"usage": N} (at most
//     MaxReleaseBytes) reports what the call used, for its line; anything
//     else is 400, and ends nothing.
//
// With Token set, both need "Authorization: Bearer <Token>" (else 401).
// Build one with NewServer; set the fields before first use. Safe for
// concurrent use. Serve it with an http.Server whose ReadTimeout and
// WriteTimeout are 0 (NewHTTPServer): a read deadline would end held calls.
type Server struct {
	// Gate decides the calls of its own task and of calls naming none
	// (required).
	Gate *capgate.Gate
	// Token, if set, is the shared secret every request must carry.
	Token string
	// MaxTasks bounds the other task ids the server keeps a gate for; a
	// call naming one more gets 400. Default DefaultMaxTasks.
	MaxTasks int
	// Logger gets the server's warnings. Default slog.Default().
	Logger *slog.Logger
	// MaxWaiting bounds how many calls of one API task (its "task" id, or
	// the gate's own) may wait in the service at once: each holds one of
	// the app's workers while it waits. A call that would wait past it is
	// decided at once (refused, with the usual Retry-After, when a lane is
	// full). Default DefaultMaxWaiting; 0: no bound.
	MaxWaiting int
	// Journal, if set, is an open journal (journal.Open) where the server
	// records the store leases of the calls it holds, each before the app
	// has its answer (Journal.AddNow), so that once this process is dead
	// another of its group releases them.
	// Its opener closes it once the server's calls have ended. Default
	// nil: none, a killed service's leases expire after lease_seconds.
	Journal *journal.Journal
	// Repeater runs the repeats of a call running (repeat_key:
	// repeat.go): the process's one Repeater over Gate, shared with the
	// gateway beside the service, if any. Default (NewServer):
	// idempotency.New(Gate); nil: a repeat_key is never looked up, every
	// call is decided as with idempotency off.
	Repeater *idempotency.Repeater

	mu      sync.Mutex
	tasks   map[string]*capgate.Gate // requires mu held
	held    map[string]*heldCall     // requires mu held
	waiting map[string]int           // task id → calls waiting; requires mu held
	killed  bool                     // requires mu held
	active  int                      // handlers of POST /v1/calls; requires mu held
	idle    chan struct{}            // closed when active drops to 0; requires mu held
	done    chan struct{}            // closed by Shutdown
	once    sync.Once
	kill    context.Context // done when Wait gave up waiting: ends every call
	killFn  context.CancelFunc
}

// heldCall is a call holding its place, until release is closed.
type heldCall struct {
	adm     *capgate.Admission
	release chan struct{}
	once    sync.Once
}

func (h *heldCall) end() { h.once.Do(func() { close(h.release) }) }

// NewServer returns a server deciding with gate, with the defaults
// (DefaultMaxTasks, DefaultMaxWaiting, a Repeater of its own).
func NewServer(gate *capgate.Gate) *Server {
	kill, killFn := context.WithCancel(context.Background())
	return &Server{Gate: gate, MaxTasks: DefaultMaxTasks, MaxWaiting: DefaultMaxWaiting, Logger: slog.Default(), Repeater: idempotency.New(gate),
		tasks: map[string]*capgate.Gate{}, held: map[string]*heldCall{}, waiting: map[string]int{},
		done: make(chan struct{}), kill: kill, killFn: killFn}
}

// track counts a handler of POST /v1/calls, whose connection it takes
// over (net/http then no longer counts it); false once the server stopped
// waiting for them.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed {
		return false
	}
	if s.active == 0 {
		s.idle = make(chan struct{})
	}
	s.active++
	return true
}

func (s *Server) untrack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active--; s.active == 0 {
		close(s.idle)
	}
}

// idleChan returns a channel closed when no handler is counted.
func (s *Server) idleChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.idle
}

// Wait waits until every call's handler has returned, or ctx is done: it
// then ends the calls still waiting or held (their contexts end, their
// places are given back), refuses new ones, and waits for their handlers
// once more.
func (s *Server) Wait(ctx context.Context) {
	select {
	case <-s.idleChan():
		return
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.killed = true
	s.mu.Unlock()
	s.killFn()
	<-s.idleChan()
}

// mayWait returns the AdmitOptions.MayWait of task's calls: a place among
// its MaxWaiting waiters.
func (s *Server) mayWait(task string) func() (func(), bool) {
	if s.MaxWaiting <= 0 {
		return nil
	}
	return func() (func(), bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.waiting[task] >= s.MaxWaiting {
			return nil, false
		}
		s.waiting[task]++
		return func() {
			s.mu.Lock()
			if s.waiting[task]--; s.waiting[task] <= 0 {
				delete(s.waiting, task)
			}
			s.mu.Unlock()
		}, true
	}
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="capgate decide"`)
		httpError(w, http.StatusUnauthorized, "a valid Authorization: Bearer token is required")
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/v1/calls":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		s.decide(w, r)
	case strings.HasPrefix(path, "/v1/calls/") && strings.HasSuffix(path, "/release"):
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		s.release(w, r, strings.TrimSuffix(strings.TrimPrefix(path, "/v1/calls/"), "/release"))
	default:
		httpError(w, http.StatusNotFound, "no such endpoint; see POST /v1/calls")
	}
}

// authorized checks the shared secret in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.Token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.Token)) == 1
}

// bodyReadTimeout bounds reading a call's body; the connection then has no
// read deadline, so it can stay open while the call is held.
const bodyReadTimeout = 10 * time.Second

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	req, call, gate, ok := s.readCall(w, r, rc)
	if !ok {
		return
	}
	// Counted before the take-over, so that no moment exists when neither
	// the http.Server nor Wait knows of the handler.
	if !s.track() {
		httpError(w, http.StatusServiceUnavailable, "the decision service is shutting down")
		return
	}
	defer s.untrack()
	// From here on the service answers on the connection itself and
	// watches it (conn.go): the connection is the lease.
	conn, _, err := rc.Hijack()
	if err != nil {
		s.logger().Error("capgate decide: take over the connection", "error", err)
		httpError(w, http.StatusInternalServerError, "the decision service could not hold the connection")
		return
	}
	cc := newCallConn(conn)
	finished := false
	defer func() { cc.finish(finished) }()
	// The call's context keeps the request's values and ends when the
	// client closes the connection (which ends a wait: the ticket leaves
	// the queue) or the server stops waiting for its handlers.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stopGone := context.AfterFunc(s.kill, cancel)
	defer stopGone()
	go func() {
		select {
		case <-cc.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	// A repeat of a call running is answered here, before admission: it
	// holds no lane place.
	rp, note, done, fin := s.repeat(ctx, cc, gate, req, call)
	if done {
		finished = fin
		return
	}
	// The first call holds its key until its answer ends (the call is
	// done or refused); the service keeps no answer: nil.
	defer rp.Finish(ctx, nil)
	opts := capgate.AdmitOptions{
		// Only a call that queues tells the client it may wait, with the
		// bound the gate's own reading of the config gave it.
		Queued: func(maxWait time.Duration) {
			_ = cc.writeHead(max(1, int(maxWait/time.Second)))
		},
		MayWait:  s.mayWait(gate.TaskID),
		Resumed:  req.Running,
		DedupErr: note,
	}
	adm := gate.AdmitWith(ctx, call, opts)
	d := Decision{ID: randhex.String(12), Headers: map[string]string{}}
	out := adm.Outcome()
	if out.Decision == capgate.DecisionNone {
		d.Decision = "off"
		finished = s.writeLine(cc, d)
		return
	}
	defer adm.Release(ctx)
	d.Decision = string(out.Decision)
	if req.Running && out.Counted {
		d.Decision = string(capgate.DecisionAdmitted) // it runs already; its line says resumed
	}
	h := http.Header{}
	answer.SetGated(h, out, call.CID)
	for k, v := range h {
		if len(v) > 0 {
			d.Headers[k] = v[0]
		}
	}
	if out.Decision == capgate.DecisionRefused {
		d.Status = http.StatusTooManyRequests
		d.Body = answer.Refusal(out)
	}
	if !out.Counted || ctx.Err() != nil {
		finished = s.writeLine(cc, d)
		return
	}
	d.Held = true
	d.MaxHoldSeconds = int(out.MaxHold / time.Second)
	if token, keys, ok := adm.StoreLease(); ok && s.Journal != nil {
		// Written before the app has its answer: a call the app runs is
		// journalled, whenever the service dies.
		if err := s.Journal.AddNow(context.WithoutCancel(ctx), token, keys, out.MaxHold); err != nil {
			s.logger().Warn("capgate decide: journal a held call (retried; a crash meanwhile would leave its place taken for lease_seconds)",
				"error", err)
		}
		defer s.Journal.Remove(token)
		defer adm.Release(ctx) // before the record's removal (deferred calls run last first); Release is idempotent
	}
	finished = s.hold(ctx, cc, adm, d)
}

// readCall reads and checks the call of r, and finds its gate; it answers
// the error itself (ok false) when there is one.
func (s *Server) readCall(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) (_ callRequest, _ capgate.Call, _ *capgate.Gate, ok bool) {
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(ct), "application/json") {
		// A browser can't send this type across origins without a
		// preflight, which the service never answers: a web page can't
		// make a loopback service hold places.
		httpError(w, http.StatusUnsupportedMediaType, "send the call as Content-Type: application/json")
		return callRequest{}, capgate.Call{}, nil, false
	}
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	req, err := decodeCall(r.Body)
	_ = rc.SetReadDeadline(time.Time{})
	req = req.conservativeRequest()
	var call capgate.Call
	if err == nil {
		cfg, _ := s.Gate.Config(r.Context())
		call, err = req.call(cfg.Policy())
	}
	var gate *capgate.Gate
	if err == nil {
		gate, err = s.gateFor(req.Task)
		if err != nil && req.Conservative {
			// Past MaxTasks: the service's own task counts it.
			gate, err = s.Gate, nil
		}
	}
	switch {
	case err != nil:
		httpError(w, http.StatusBadRequest, err.Error())
		return callRequest{}, capgate.Call{}, nil, false
	case s.shuttingDown():
		httpError(w, http.StatusServiceUnavailable, "the decision service is shutting down")
		return callRequest{}, capgate.Call{}, nil, false
	}
	return req, call, gate, true
}

// hold writes the decision d of a counted call and holds the call until
// the client closes the connection (or dies), releases it by id,
// max_hold_seconds pass, or the server shuts down; the caller's deferred
// Release then gives the place back (at once, when the client is gone).
// It reports whether the answer was written to its end.
func (s *Server) hold(ctx context.Context, cc *callConn, adm *capgate.Admission, d Decision) bool {
	hc := &heldCall{adm: adm, release: make(chan struct{})}
	s.mu.Lock()
	s.held[d.ID] = hc
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.held, d.ID)
		s.mu.Unlock()
	}()
	if !s.writeLine(cc, d) {
		return false // the client is gone
	}
	timer := time.NewTimer(adm.Outcome().MaxHold)
	defer timer.Stop()
	var why string
	select {
	case <-ctx.Done():
		return false // the client closed the connection (or died)
	case <-hc.release:
		why = "release"
	case <-timer.C:
		why = "max_hold"
	case <-s.done:
		why = "shutdown"
	}
	adm.Release(ctx) // before telling the client, so its next call finds the place free
	return s.writeLine(cc, End{Released: why})
}

// writeLine writes v as one JSON line; false when the client is gone.
func (s *Server) writeLine(cc *callConn, v any) bool {
	b, err := jsonenc.Marshal(v)
	if err != nil {
		s.logger().Error("capgate decide: encode a line", "error", err)
		return false
	}
	return cc.writeLine(append(b, '\n')) == nil
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, id string) {
	usage, err := readRelease(r.Body)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	hc := s.held[id]
	s.mu.Unlock()
	if hc == nil {
		httpError(w, http.StatusNotFound, "no call of that id is held")
		return
	}
	if usage >= 0 {
		hc.adm.SetUsage(usage) // before the end: the holder releases after it
	}
	hc.end()
	w.WriteHeader(http.StatusNoContent)
}

// MaxReleaseBytes is the most a release's body may hold.
const MaxReleaseBytes = 1 << 10

// readRelease reads a release's optional body, {"usage": N}: what the call
// used (N a whole number from 0 to 2^63-1), -1 when it says nothing.
func readRelease(body io.Reader) (int64, error) {
	b, err := io.ReadAll(io.LimitReader(body, MaxReleaseBytes+1))
	switch {
	case err != nil:
		return -1, fmt.Errorf("read the release: %w", err)
	case len(b) > MaxReleaseBytes:
		return -1, fmt.Errorf("the release is larger than %d bytes", MaxReleaseBytes)
	case len(bytes.TrimSpace(b)) == 0:
		return -1, nil
	}
	var rel struct {
		Usage json.RawMessage `json:"usage"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rel); err != nil {
		return -1, fmt.Errorf("the release: want {\"usage\": N} or nothing: %w", err)
	}
	if dec.More() {
		return -1, errors.New("the release is followed by more data; send one JSON object")
	}
	if rel.Usage == nil || string(rel.Usage) == "null" {
		return -1, nil
	}
	n, err := strconv.ParseInt(string(rel.Usage), 10, 64) // digits only: a "7", 7.0 or 1e3 fails
	if err != nil || n < 0 || rel.Usage[0] == '+' {
		return -1, fmt.Errorf("the release's usage %.40s: want a whole number from 0 to 2^63-1", rel.Usage)
	}
	return n, nil
}

// gateFor returns the gate of task: the Server's own for "" or its task
// id, else one made for it by Gate.ForTask (sharing the store, config,
// sink, local lanes, skip window and adaptive limits), at most MaxTasks of them.
func (s *Server) gateFor(task string) (*capgate.Gate, error) {
	g := s.Gate
	if task == "" || task == g.TaskID {
		return g, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tasks[task]; ok {
		return t, nil
	}
	max := s.MaxTasks
	if max <= 0 {
		max = DefaultMaxTasks
	}
	if len(s.tasks) >= max {
		return nil, errors.New(`too many distinct "task" ids; leave "task" out to use the service's own`)
	}
	t, err := g.ForTask(task) // one skip window per process, as the spec asks
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", task, err)
	}
	s.tasks[task] = t
	return t, nil
}

func (s *Server) shuttingDown() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Shutdown ends every held call (its client reads {"released":"shutdown"})
// and refuses new ones with 503. Call it before the http.Server's
// Shutdown, which then waits for the held calls' handlers to return.
func (s *Server) Shutdown() {
	s.once.Do(func() { close(s.done) })
}

// Close closes the gates the server made for other tasks (a last try at
// their pending releases); call it once no handler runs. The Server's own
// Gate is its owner's to close.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	gates := make([]*capgate.Gate, 0, len(s.tasks))
	for _, g := range s.tasks {
		gates = append(gates, g)
	}
	s.tasks = map[string]*capgate.Gate{}
	s.mu.Unlock()
	var errs []error
	for _, g := range gates {
		errs = append(errs, g.Close(ctx))
	}
	return errors.Join(errs...)
}

// httpError answers a JSON {"detail": msg}.
func httpError(w http.ResponseWriter, code int, msg string) {
	b, _ := jsonenc.Marshal(map[string]string{"detail": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
