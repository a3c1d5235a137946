package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// Defaults of the lane read behind the lane gauges.
const (
	// DefaultLanesMaxAge is how long one read of the lanes serves scrapes:
	// at most one read per this long, however many scrapers there are.
	DefaultLanesMaxAge = 2 * time.Second
	// DefaultLanesTimeout bounds one read of the lanes.
	DefaultLanesTimeout = 2 * time.Second
)

// LaneReader reads the lanes' state now; capgate.Gate implements it
// (ReadLanes: the fixed lanes and the gate's own task lane, no key scan).
type LaneReader interface {
	ReadLanes(ctx context.Context, cfg settings.Config) (st status.Snapshot, local bool)
}

// Where the lane series come from (the source label).
const (
	SourceStore = "store" // the lane store: all gateways
	SourceLocal = "local" // this gateway's local lanes, while the store is unavailable
)

// WithLanes exports the lanes as the lane store holds them at scrape time
// (not as some call last saw them, which stays stale once the load stops):
// capgate_lane_in_flight{lane} and capgate_lane_limit{lane} for each
// cluster lane of the policy, this gateway's task lanes and every
// <lane>:<tier> of a lane keyed by tier (the lane label is the policy's
// lane name);
// capgate_lane_queued{lane}, the calls of all gateways waiting on it; and
// capgate_wait_max_waiting, the config's wait.max_waiting. One read serves
// every scrape for DefaultLanesMaxAge. Each series has source="store".
// A read that fails counts in capgate_lane_reads_failed_total; then, if
// the reader has local lanes (a capgate.Gate with Gate.Local), the series come from them,
// with source="local" (this gateway's calls, against the degraded limits
// it applies: exactly what decides during the outage), else there are
// none (no stale values).
func WithLanes(lanes LaneReader, configs settings.Source) Option {
	return func(m *Metrics) {
		m.lanes = &laneCollector{read: lanes, configs: configs, now: time.Now,
			maxAge: DefaultLanesMaxAge, timeout: DefaultLanesTimeout}
		m.funcs = append(m.funcs, m.lanes)
	}
}

var (
	descInFlight = prometheus.NewDesc(Namespace+"_lane_in_flight",
		"Calls in flight per lane, all gateways, read from the lane store (at most 2 s old); source local: this gateway's local lanes while the store is unavailable.", []string{"lane", "source"}, nil)
	descLimit = prometheus.NewDesc(Namespace+"_lane_limit",
		"Limit per lane in the config in force (api_heavy: the cluster limit); source local: the degraded limit the local lanes apply.", []string{"lane", "source"}, nil)
	descQueued = prometheus.NewDesc(Namespace+"_lane_queued",
		"Calls of all gateways waiting for a slot per lane, read from the lane store (at most 2 s old); source local: this gateway's local lanes while the store is unavailable.", []string{"lane", "source"}, nil)
	descMaxWaiting = prometheus.NewDesc(Namespace+"_wait_max_waiting",
		"The config's wait.max_waiting: the most calls that may wait at once, in all.", nil, nil)
	descReadsFailed = prometheus.NewDesc(Namespace+"_lane_reads_failed_total",
		"Reads of the lane store for metrics that failed (the lane series then come from the local lanes, source local, or are absent).", nil, nil)
)

// laneCollector reads the lanes on Collect, at most once per maxAge.
type laneCollector struct {
	read    LaneReader
	configs settings.Source
	now     func() time.Time
	maxAge  time.Duration
	timeout time.Duration

	mu     sync.Mutex // held across a read, so concurrent scrapes share it
	at     time.Time  // when st was read; requires mu held
	st     status.Snapshot
	source string // SourceStore, or SourceLocal when st is the local lanes
	cfg    settings.Config
	failed uint64
}

func (c *laneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descLimit, descQueued, descMaxWaiting, descReadsFailed} {
		ch <- d
	}
}

// snapshot returns the lanes read within maxAge, reading them now if
// there is none.
func (c *laneCollector) snapshot() (status.Snapshot, string, settings.Config, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < c.maxAge {
		return c.st, c.source, c.cfg, c.failed
	}
	// A scrape carries no context (promhttp's Collect has none): the read
	// gets its own deadline so a store that hangs can't hold the scrape.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.cfg = c.configs.Config(ctx)
	st, local := c.read.ReadLanes(ctx, c.cfg)
	c.st, c.at, c.source = st, now, SourceStore
	if local {
		c.source = SourceLocal
	}
	if local || st.Store != status.OK {
		c.failed++ // the store could not be read
	}
	return c.st, c.source, c.cfg, c.failed
}

func (c *laneCollector) Collect(ch chan<- prometheus.Metric) {
	st, source, cfg, failed := c.snapshot()
	ch <- prometheus.MustNewConstMetric(descReadsFailed, prometheus.CounterValue, float64(failed))
	ch <- prometheus.MustNewConstMetric(descMaxWaiting, prometheus.GaugeValue, float64(cfg.Wait.MaxWaiting))
	if st.Store != status.OK {
		return
	}
	lane := func(name string, l status.Lane) {
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(l.InFlight), name, source)
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(l.Limit), name, source)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(l.Waiting), name, source)
	}
	// The label is the policy's lane name; a lane keyed by tier is
	// <lane>:<tier>. Lanes keyed by the caller or a call field have no
	// series (ReadLanes reads none of their keys).
	for _, l := range st.Shared {
		lane(l.Name, l.Lane)
	}
	for _, kl := range st.Keyed {
		switch {
		case kl.Scope == "task":
			for _, t := range kl.Entries { // ReadLanes: this gateway's own task only
				lane(kl.Name, t)
			}
		case kl.Key == "tier":
			for t, l := range kl.Entries {
				lane(kl.Name+":"+t, l)
			}
		}
	}
}
