// Package metrics exposes what the gate does as Prometheus metrics:
// decisions, calls in flight per lane as the lane store holds them at
// scrape time (WithLanes), requests by status and class, the upstream's
// latency and failures, the build, how long calls held their leases, calls waiting per lane and how long they
// waited, lane store errors and skipped operations, decisions made by the
// local lanes alone, lease losses, oversize bodies, log lines dropped, the
// config version in force and whether the stores answer. It implements
// capgate.Observer and registers on the prometheus.Registerer it is given;
// it has no global state.
package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/status"
)

// Namespace prefixes every metric name.
const Namespace = "capgate"

// HeldBuckets are the buckets of the held-time histogram, in seconds: heavy
// calls run from a fraction of a second to max_hold_seconds (900).
var HeldBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900}

// Metrics is a capgate.Observer that keeps Prometheus metrics. Set it as
// Gate.Observer, and OversizeBody as Classifier.Oversize. Safe for
// concurrent use.
type Metrics struct {
	policy    *policy.Policy         // WithPolicy; nil: the built-in one
	decisions *prometheus.CounterVec // decision, endpoint (the route's log name), tier
	held      prometheus.Histogram   // seconds
	storeErrs *prometheus.CounterVec // op
	skipped   *prometheus.CounterVec // op
	lost      prometheus.Counter     // leases lost
	oversize  prometheus.Counter     // bodies too large to classify
	waiting   *prometheus.GaugeVec   // lane: this gateway's calls waiting
	wait      prometheus.Histogram   // seconds waited
	degraded  *prometheus.CounterVec // decision: decided by the local lanes alone
	bufFull   prometheus.Counter     // heavy calls answered 503: the classification buffer was full
	funcs     []prometheus.Collector // from options
	lanes     *laneCollector         // WithLanes, or nil
	recent    *status.Recent         // WithRecent, or nil

	requests     *prometheus.CounterVec   // code, class: every request the gateway answered
	upstream     *prometheus.HistogramVec // class: seconds to the upstream's response header
	upstreamErrs *prometheus.CounterVec   // kind: upstream calls that failed
}

var _ capgate.Observer = (*Metrics)(nil)

// UpstreamBuckets are the buckets of the upstream latency histogram, in
// seconds: light calls answer in milliseconds, heavy ones take up to
// minutes.
var UpstreamBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// WaitBuckets are the buckets of the wait histogram, in seconds: from a
// slot handed over at once to wait.max_seconds (at most 300).
var WaitBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}

// Option adds a metric read from the caller's state.
type Option func(*Metrics)

// WithLogDropped exports dropped() as capgate_log_lines_dropped_total: the
// log lines the sink dropped because its queue was full (logsink.Sink's
// Dropped).
func WithLogDropped(dropped func() uint64) Option {
	return func(m *Metrics) {
		m.funcs = append(m.funcs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "log_lines_dropped_total",
			Help:      "Log lines dropped because the log queue was full.",
		}, func() float64 { return float64(dropped()) }))
	}
}

// WithBuildInfo exports capgate_build_info{version,revision} 1: which
// build runs, to join on or alert when gateways disagree.
func WithBuildInfo(version, revision string) Option {
	return func(m *Metrics) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace:   Namespace,
			Name:        "build_info",
			Help:        "The capgate build running: always 1, labelled with its version and VCS revision.",
			ConstLabels: prometheus.Labels{"version": version, "revision": revision},
		})
		g.Set(1)
		m.funcs = append(m.funcs, g)
	}
}

// WithConfigVersion exports version() as capgate_config_version: the
// version (row id) of the runtime config in force, 0 for the defaults.
func WithConfigVersion(version func() int64) Option {
	return func(m *Metrics) {
		m.funcs = append(m.funcs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "config_version",
			Help:      "Version of the runtime capacity config in force (0: the defaults).",
		}, func() float64 { return float64(version()) }))
	}
}

// WithStoreUp exports up(store) as capgate_store_up{store}: 1 when the
// gateway's last background check of that store (lanes, config) passed, 0
// when it failed, -1 before the first check. A store that is down never
// fails the health probes; this is where it shows.
func WithStoreUp(up func(store string) float64, stores ...string) Option {
	return func(m *Metrics) {
		for _, name := range stores {
			m.funcs = append(m.funcs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace:   Namespace,
				Name:        "store_up",
				Help:        "Whether the last background check of the store passed (1), failed (0), or has not run (-1).",
				ConstLabels: prometheus.Labels{"store": name},
			}, func() float64 { return up(name) }))
		}
	}
}

// WithRecent also counts each decision in r, by tier and lane, for the
// status page's counts over the last minutes (status.Recent).
func WithRecent(r *status.Recent) Option {
	return func(m *Metrics) { m.recent = r }
}

// WithPolicy names the policy whose routes, tiers and lanes the families
// start with at zero (zeros). Default: the built-in policy. The label
// values follow each call's own policy either way.
func WithPolicy(p *policy.Policy) Option {
	return func(m *Metrics) { m.policy = p }
}

// New returns metrics registered on reg. It returns an error if reg
// refuses one of them (a name already registered, say).
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	var cs collectors
	m := &Metrics{
		decisions: cs.counterVec("decisions_total", "Gated calls by decision, endpoint and tier.",
			"decision", "endpoint", "tier"),
		held: cs.histogram("held_seconds", "How long gated calls held their leases.", HeldBuckets),
		storeErrs: cs.counterVec("store_errors_total", "Lane store operations that failed, by operation.",
			"op"),
		skipped: cs.counterVec("store_skipped_total",
			"Lane store operations skipped because the store failed recently, by operation.", "op"),
		lost: cs.counter("leases_lost_total", "Calls whose leases expired while they ran."),
		waiting: cs.gaugeVec("lane_waiting", "Calls of this gateway waiting for a slot, per lane they wait on.",
			"lane"),
		wait: cs.histogram("wait_seconds",
			"How long calls waited for a slot (those that waited), however the wait ended.", WaitBuckets),
		degraded: cs.counterVec("degraded_decisions_total",
			"Gated calls decided by this gateway's local lanes while the lane store was unavailable, by decision.",
			"decision"),
		oversize: cs.counter("oversize_bodies_total",
			"Heavy-path calls gated as bulk because their body exceeded --max-body-bytes."),
		bufFull: cs.counter("buffer_full_total",
			"Heavy-path calls answered 503 because the bytes held for classification reached --max-buffered-bytes."),
		requests: cs.counterVec("requests_total",
			"Requests the gateway answered, by status code and class (heavy: gated; light: proxied ungated; staff: capgate's own endpoints).",
			"code", "class"),
		upstream: cs.histogramVec("upstream_seconds",
			"Time from sending a call to the upstream to its response header, by class (heavy, light).", UpstreamBuckets, "class"),
		upstreamErrs: cs.counterVec("upstream_errors_total",
			"Calls the upstream did not answer, by kind (timeout, connect, reset, other); clients that left are not counted.",
			"kind"),
	}
	for _, o := range opts {
		o(m)
	}
	m.zeros()
	cs = append(cs, m.funcs...)
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}

// Label values every family starts with, at zero (see zeros).
var (
	storeOps           = []string{"acquire", "renew", "release"}
	upstreamErrorKinds = []string{"timeout", "connect", "reset", "other"}
	decisionValues     = []capgate.Decision{capgate.DecisionAdmitted, capgate.DecisionShadowRefused,
		capgate.DecisionRefused, capgate.DecisionUnavailable}
	requestClasses = []string{"heavy", "light", "staff"}
	// A repeat of a call (idempotency) is never decided by the local lanes,
	// so these have a decisions_total series but no degraded one.
	repeatDecisions = []capgate.Decision{capgate.DecisionJoined, capgate.DecisionReplayed}
)

// zeros makes every labelled family exist from the start, each known
// series at 0: a counter that appears only at its first event leaves a
// dashboard panel at "No data" and an alert's rate() without a series
// until then. The user lane has no series (one per user would grow
// without bound); requests_total starts with code 200 of each class, its
// other codes appear as they are answered.
func (m *Metrics) zeros() {
	p := m.policy
	if p == nil {
		p = policy.OCL()
	}
	for _, op := range storeOps {
		m.storeErrs.WithLabelValues(op)
		m.skipped.WithLabelValues(op)
	}
	for _, k := range upstreamErrorKinds {
		m.upstreamErrs.WithLabelValues(k)
	}
	for _, d := range decisionValues {
		m.degraded.WithLabelValues(string(d))
	}
	for _, d := range append(decisionValues[:len(decisionValues):len(decisionValues)], repeatDecisions...) {
		for _, r := range p.Routes {
			for _, t := range p.Tiers() {
				m.decisions.WithLabelValues(string(d), r.LogName, t)
			}
		}
	}
	for _, c := range requestClasses {
		m.requests.WithLabelValues("200", c)
	}
	for _, c := range []string{"heavy", "light"} {
		m.upstream.WithLabelValues(c)
	}
	for _, l := range p.Lanes {
		switch {
		case l.ByTier():
			for _, t := range p.Tiers() {
				m.waiting.WithLabelValues(l.Name + ":" + t)
			}
		case l.Scope != policy.ScopeKey:
			m.waiting.WithLabelValues(l.Name)
		}
	}
}

// collectors gathers the metrics New declares, in the order they are
// declared, to register them in one pass.
type collectors []prometheus.Collector

func (cs *collectors) add(c prometheus.Collector) { *cs = append(*cs, c) }

func (cs *collectors) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
	cs.add(c)
	return c
}

func (cs *collectors) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	cs.add(c)
	return c
}

func (cs *collectors) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	cs.add(g)
	return g
}

func (cs *collectors) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	cs.add(h)
	return h
}

func (cs *collectors) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets})
	cs.add(h)
	return h
}

// Admitted implements capgate.Observer. It records nothing: the lanes'
// counts are read from the store at scrape time (WithLanes), since what a
// call saw stays on a gauge long after the load has stopped.
func (m *Metrics) Admitted(*capgate.Admission) {}

// Released implements capgate.Observer: it counts the decision and the
// time the call held its leases.
func (m *Metrics) Released(a *capgate.Admission) {
	o := a.Outcome()
	call := o.Call
	m.decisions.WithLabelValues(string(o.Decision), policy.RouteLogName(call.Route), call.Tier).Inc()
	if o.Degraded {
		m.degraded.WithLabelValues(string(o.Decision)).Inc()
	}
	if a.LeaseLost() {
		m.lost.Inc()
	}
	if d, ok := a.Held(); ok {
		m.held.Observe(d.Seconds())
	}
	if m.recent != nil && o.Decision != "" {
		var lanes []string
		scope := ""
		switch o.Decision {
		case capgate.DecisionRefused, capgate.DecisionShadowRefused:
			scope = string(o.Scope)
		default:
			for _, l := range o.Lanes {
				lanes = append(lanes, string(l.Name))
			}
		}
		m.recent.Record(call.Tier, string(o.Decision), lanes, scope)
	}
}

// laneLabel names a lane for the lane label: a cluster or task lane by its
// name, a lane keyed by tier as
// <lane>:<tier> (OCL: tier:preview); "" for a lane keyed by the caller or
// by a call field (one series per user, or per value a client sends,
// would grow without bound).
func laneLabel(l capgate.Lane, call capgate.Call) string {
	switch {
	case l.Spec == nil || l.Spec.Scope != policy.ScopeKey:
		return string(l.Name)
	case l.Spec.ByTier():
		return string(l.Name) + ":" + call.Tier
	}
	return ""
}

// WaitStarted implements capgate.Observer: the call counts as waiting
// on each of its lanes (the user lane left out).
func (m *Metrics) WaitStarted(a *capgate.Admission) { m.addWaiting(a, 1) }

// WaitEnded implements capgate.Observer.
func (m *Metrics) WaitEnded(a *capgate.Admission, waited time.Duration) {
	m.addWaiting(a, -1)
	m.wait.Observe(waited.Seconds())
}

func (m *Metrics) addWaiting(a *capgate.Admission, d float64) {
	o := a.Outcome()
	for _, l := range o.Lanes {
		if name := laneLabel(l, o.Call); name != "" {
			m.waiting.WithLabelValues(name).Add(d)
		}
	}
}

// StoreError implements capgate.Observer.
func (m *Metrics) StoreError(op string, _ error) { m.storeErrs.WithLabelValues(op).Inc() }

// StoreSkipped implements capgate.Observer.
func (m *Metrics) StoreSkipped(op string) { m.skipped.WithLabelValues(op).Inc() }

// OversizeBody counts a call gated as bulk because its body was too large
// to classify; use it as capgatehttp.Classifier.Oversize.
func (m *Metrics) OversizeBody() { m.oversize.Inc() }

// BufferFull counts a heavy-path call answered 503 because the
// classification buffer budget was spent; use it as
// capgatehttp.Classifier.BufferFull.
func (m *Metrics) BufferFull() { m.bufFull.Inc() }

// Request implements capgatehttp.GatewayObserver: one request answered
// with code, of class heavy, light or staff.
func (m *Metrics) Request(class string, code int) {
	m.requests.WithLabelValues(strconv.Itoa(code), class).Inc()
}

// Upstream implements capgatehttp.GatewayObserver: the upstream answered
// a call of class (heavy or light) with its response header after d.
func (m *Metrics) Upstream(class string, d time.Duration) {
	m.upstream.WithLabelValues(class).Observe(d.Seconds())
}

// UpstreamError implements capgatehttp.GatewayObserver: the upstream
// failed a call, by kind (timeout, connect, reset, other).
func (m *Metrics) UpstreamError(kind string) { m.upstreamErrs.WithLabelValues(kind).Inc() }
