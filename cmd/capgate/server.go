package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/identity"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/internal/loop"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/redis"
)

// ServeOptions are the settings of capgate serve beyond the shared ones.
type ServeOptions struct {
	Settings
	Listen          string        // --listen, CAPGATE_LISTEN
	AdminListen     string        // --admin-listen, CAPGATE_ADMIN_LISTEN: staff API, metrics and health only there
	Upstream        string        // --upstream, CAPGATE_UPSTREAM (required)
	Identity        string        // --identity, CAPGATE_IDENTITY: upstream, header or tokens
	Tokens          string        // --tokens, CAPGATE_TOKENS: the tokens file
	TrustedProxies  string        // --trusted-proxies, CAPGATE_TRUSTED_PROXIES: comma-separated CIDRs
	PathPrefix      string        // --path-prefix, CAPGATE_PATH_PREFIX
	MaxBodyBytes    int64         // --max-body-bytes, CAPGATE_MAX_BODY_BYTES
	CORSOrigins     string        // --cors-origins, CAPGATE_CORS_ORIGINS: comma-separated; empty: echo Origin
	LogFile         string        // --log-file, CAPGATE_LOG_FILE: the ocl_capacity lines; empty: stdout
	ShutdownTimeout time.Duration // --shutdown-timeout, CAPGATE_SHUTDOWN_TIMEOUT
	CoreGroup       string        // --core-group
	EarlyGroup      string        // --early-access-group
	// LocalLanes (--local-lanes, CAPGATE_LOCAL_LANES, default true) keeps
	// this gateway's own count of its calls beside the Redis lanes: it
	// refuses what this gateway alone knows is full, and holds degraded
	// limits while Redis is unavailable (capgate.Gate.Local).
	LocalLanes bool

	// Request-front hardening (docs/SECURITY.md).
	MaxBufferedBytes int64  // --max-buffered-bytes, CAPGATE_MAX_BUFFERED_BYTES: bytes held for classification (and headers) across calls
	MaxHeaderBytes   int    // --max-header-bytes, CAPGATE_MAX_HEADER_BYTES: one request's header at most; 0: capgatehttp.DefaultMaxHeaderBytes
	UpgradePaths     string // --upgrade-paths, CAPGATE_UPGRADE_PATHS: comma-separated path prefixes that may upgrade
	PublicMetrics    bool   // --public-metrics, CAPGATE_PUBLIC_METRICS: /metrics without staff credentials

	// Start-up and operations (ops).
	observeOptions // --metrics-token, --staff-tokens, --access-log (observe.go)

	SkipMigrate bool   // --migrate=false, CAPGATE_MIGRATE=false: leave the schema to capgate migrate
	LogFormat   string // --log-format, CAPGATE_LOG_FORMAT: text (default) or json
	effective   []any  // every flag's value, for the start-up log line

	// Decide serves the decision protocol beside the gateway
	// (--decide-listen, --decide-token, --decide-no-token).
	Decide DecideOptions
}

// Server is one running capgate gateway: its stores, gate and handlers.
// Build it with NewServer, run it with Serve, and Close it.
type Server struct {
	Gate    *capgate.Gate
	Configs *config.Service
	Lanes   capgate.LaneStore
	Sink    *logsink.Sink
	Handler http.Handler // the gateway (and, without AdminListen, the staff API, /metrics, the probes)
	Admin   http.Handler // the staff API, /metrics and the probes, when AdminListen is set
	Health  *capgatehttp.Health

	opts    ServeOptions
	logger  *slog.Logger
	closers []func() error
	store   MigratingStore
	logFile *reopenFile      // --log-file, reopened on SIGHUP
	tokens  *reloadingTokens // --identity tokens, reloaded on SIGHUP
	// staffTokens (--staff-tokens) and accessFile (--access-log) are
	// reloaded and reopened on SIGHUP.
	staffTokens *reloadingTokens
	accessFile  *reopenFile
	// migrateLater is set when the migration at start failed (the
	// database was down): Serve retries it in the background.
	migrateLater bool
}

// NewServer opens the stores and builds the gateway of opts. lines
// receives the ocl_capacity lines when opts.LogFile is empty. It returns
// an error for an invalid setting; an upstream that is down is not one.
func NewServer(ctx context.Context, opts ServeOptions, lines io.Writer, logger *slog.Logger) (_ *Server, err error) {
	s := &Server{opts: opts, logger: logger}
	defer func() {
		if err != nil {
			s.closeStores()
		}
	}()
	if opts.Upstream == "" {
		return nil, errors.New("--upstream is required (CAPGATE_UPSTREAM): the API to put capgate in front of")
	}
	up, err := url.Parse(opts.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("--upstream %q: want an absolute http(s) URL such as http://127.0.0.1:8000", opts.Upstream)
	}
	if opts.MaxBodyBytes <= 0 {
		return nil, fmt.Errorf("--max-body-bytes %d: want a positive number of bytes", opts.MaxBodyBytes)
	}
	if opts.TaskID == "" {
		// One shared api_heavy_task lane would make the per-task limit act
		// cluster-wide and hide this gateway from the degraded limits.
		return nil, errors.New("--task-id is empty (CAPACITY_TASK_ID; default the hostname): each gateway needs a task id of its own")
	}
	proxies, err := parsePrefixes(opts.TrustedProxies)
	if err != nil {
		return nil, err
	}

	// The log sink first: the config service writes its change lines there.
	if opts.LogFile != "" {
		f, err := openLogFile(opts.LogFile)
		if err != nil {
			return nil, fmt.Errorf("--log-file: %w", err)
		}
		s.closers = append(s.closers, f.Close)
		s.logFile = f
		lines = f
	}
	s.Sink = logsink.New(lines)
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), logsink.DefaultDrainTimeout)
		defer cancel()
		return s.Sink.Close(ctx)
	})

	keyPrefix, err := opts.LaneKeyPrefix()
	if err != nil {
		return nil, err
	}
	if opts.HasRedis() {
		ro := opts.RedisOptions()
		ro.KeyPrefix = keyPrefix // the store checks it (and tags it on a cluster)
		rs, err := redis.Open(ro)
		if err != nil {
			return nil, fmt.Errorf("redis lanes: %w", err)
		}
		s.closers = append(s.closers, rs.Close)
		s.Lanes = rs
		logger.Info("lanes in Redis", "redis", rs.String())
	} else {
		s.Lanes = memory.New(nil)
		logger.Warn("lanes are in-process: they count this gateway only; with more than one gateway set --redis, --redis-sentinels or --redis-cluster")
	}

	cstore, err := ConnectConfigStore(ctx, opts.Database)
	if err != nil {
		return nil, fmt.Errorf("config store: %w", err)
	}
	s.closers = append(s.closers, cstore.Close)
	s.store = cstore
	s.prepareSchema(ctx)
	s.Configs = opts.NewConfigService(cstore)
	s.Configs.Sink = s.Sink
	s.Configs.Logger = logger

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Health: the probes never fail for a store that is down (fail open);
	// the stores' state is in their bodies and in capgate_store_up.
	s.Health = &capgatehttp.Health{
		Checks: []capgatehttp.HealthCheck{
			{Name: "lanes", Check: s.Lanes.Ping},
			{Name: "config", Check: func(context.Context) error {
				st := s.Configs.ReadState()
				if !st.Ready {
					return errors.New("not read yet")
				}
				return st.Err
			}, Live: true},
		},
		Ready: func() bool { return s.Configs.ReadState().Ready },
	}
	if s.Gate, err = capgate.NewGate(s.Lanes, s.Configs, s.Sink, opts.TaskID); err != nil {
		return nil, err
	}
	// The lane gauges are read from the store at scrape time, through the
	// gate's keys (WithLanes), so they read 0 once the load stops.
	m, err := metrics.New(reg, metrics.WithLogDropped(s.Sink.Dropped), metrics.WithConfigVersion(s.Configs.Version),
		metrics.WithStoreUp(s.Health.Up, "lanes", "config"), metrics.WithBuildInfo(version(), revision()),
		metrics.WithLanes(s.Gate, s.Configs), metrics.WithAdvisedLimits(s.advisedLimits))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	s.Gate.KeyPrefix = keyPrefix
	s.Gate.Skip = capgate.NewSkipWindow(opts.RedisRetry, nil)
	s.Gate.Logger = logger
	s.Gate.Observer = m
	if opts.HasRedis() && opts.LocalLanes {
		s.Gate.Local = memory.New(nil)
	}
	// The adaptive limits (capgate.Tuner): idle unless the config has an
	// "adaptive" key; Serve runs its loop.
	if t, err := s.Gate.NewTunerFor(); err == nil {
		s.Gate.Tuner = t
	} else {
		logger.Warn("adaptive limits unavailable", "error", err)
	}
	// Before the stores close: the last try at releases still pending.
	s.closers = append(s.closers, func() error {
		// The store owns its deadline (redis.Options.Deadline); a store
		// that states none gets the gate's default, as in the gate.
		d := capgate.DefaultStoreDeadline
		if sd, ok := s.Lanes.(capgate.StoreDeadline); ok && sd.Deadline() > 0 {
			d = sd.Deadline()
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return s.Gate.Close(ctx)
	})

	ids, err := newIdentity(opts, proxies)
	if err != nil {
		return nil, err
	}
	if t, ok := ids.(*reloadingTokens); ok {
		s.tokens = t
	}
	// The staff endpoints take the static staff tokens before asking ids,
	// so they keep working while the API (the upstream identity) is down.
	staffIDs := ids
	if opts.StaffTokens != "" {
		if s.staffTokens, err = loadStaffTokens(opts.StaffTokens); err != nil {
			return nil, err
		}
		staffIDs = identity.NewStaffIdentity(s.staffTokens, ids)
	}
	staff := capgatehttp.NewStaffHandler(s.Configs, staffIDs, s.Gate)
	staff.Logger = logger
	staff.Health = s.Health
	gcfg := capgatehttp.GatewayConfig{
		Upstream: up,
		Gate:     s.Gate,
		Identify: ids,
		Classifier: &capgatehttp.Classifier{PathPrefix: opts.PathPrefix, MaxBodyBytes: opts.MaxBodyBytes, Oversize: m.OversizeBody,
			Budget: capgatehttp.NewBudget(opts.MaxBufferedBytes), BufferFull: m.BufferFull},
		TrustedProxies: proxies,
		UpgradePaths:   splitList(opts.UpgradePaths),
		PublicMetrics:  opts.PublicMetrics,
		MetricsToken:   opts.MetricsToken,
		StaffIdentify:  staffIDs,
		Observer:       m,
		Logger:         logger,
		Options: []capgatehttp.Option{
			capgatehttp.WithTierGroups(capgate.TierGroups{Core: opts.CoreGroup, EarlyAccess: opts.EarlyGroup}),
			capgatehttp.WithCORSOrigins(splitList(opts.CORSOrigins)),
		},
	}
	if opts.Identity == "header" || opts.Identity == "tokens" {
		// Callers these modes can't name (no trusted proxy's word, a session
		// cookie, a token not in the file) may still carry credentials the
		// API accepts: their heavy calls share one lane, never pass ungated.
		gcfg.Options = append(gcfg.Options, capgatehttp.WithAnonymousAs(identity.AnonymousUser))
	}
	if opts.AccessLog != "" {
		if gcfg.AccessLog, err = s.openAccessLog(opts.AccessLog); err != nil {
			return nil, err
		}
	}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if opts.AdminListen == "" {
		gcfg.Staff, gcfg.Metrics, gcfg.Health = staff, metricsHandler, s.Health
	} else {
		mux := http.NewServeMux()
		mux.Handle("/capacity/", staff)
		mux.Handle("GET /metrics", metricsHandler)
		mux.Handle("GET /livez", s.Health.Livez())
		mux.Handle("GET /healthz", s.Health.Livez())
		mux.Handle("GET /readyz", s.Health.Readyz())
		s.Admin = capgatehttp.ObserveStaff(mux, m, gcfg.AccessLog)
	}
	gw, err := capgatehttp.NewGateway(gcfg)
	if err != nil {
		return nil, err
	}
	s.Handler = gw
	return s, nil
}

// startMigrateTimeout bounds the migration tried at start: a database
// that doesn't answer by then is migrated in the background.
const startMigrateTimeout = 5 * time.Second

// prepareSchema migrates the config database at start (unless --migrate
// =false). A database that is down is not fatal: the gateway serves on
// the defaults (enforce as shadow) and migrates in the background once it
// answers. With --migrate=false it only warns when the schema is behind.
func (s *Server) prepareSchema(ctx context.Context) {
	if p := sqlitePath(s.opts.Database); p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			s.logger.Info("config in SQLite", "path", abs)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startMigrateTimeout)
	defer cancel()
	if s.opts.SkipMigrate {
		have, err := s.store.DatabaseVersion(ctx)
		switch {
		case err != nil:
			s.logger.Warn("config database not readable at start; serving on the defaults until it is", "error", err)
		case have < latestSchema(s.opts.Database):
			s.logger.Warn("config database schema is behind and --migrate=false: run capgate migrate; serving on the defaults until then",
				"have", have, "want", latestSchema(s.opts.Database))
		}
		return
	}
	if err := s.store.Migrate(ctx); err != nil {
		s.logger.Warn("config database not ready at start; serving on the defaults (enforce as shadow), migrating in the background",
			"error", err)
		s.migrateLater = true
	}
}

// Backoff of the background migration.
const (
	migrateRetryMin = time.Second
	migrateRetryMax = 30 * time.Second
)

// migrateInBackground retries the migration, backing off, until it
// succeeds or ctx is done; then the config is read at once.
func (s *Server) migrateInBackground(ctx context.Context) {
	wait := migrateRetryMin
	loop.Run(ctx, wait, func(ctx context.Context) (time.Duration, bool) {
		mctx, cancel := context.WithTimeout(ctx, startMigrateTimeout)
		err := s.store.Migrate(mctx)
		cancel()
		if err == nil {
			s.logger.Info("config database migrated; reading the config")
			s.Configs.Invalidate()
			s.Configs.Config(ctx)
			return 0, true
		}
		s.logger.Debug("config database still not ready", "error", err)
		wait = min(2*wait, migrateRetryMax)
		return wait, false
	})
}

func newIdentity(opts ServeOptions, proxies []netip.Prefix) (identity.Identifier, error) {
	switch opts.Identity {
	case "upstream", "":
		id, err := identity.NewUpstreamIdentity(opts.Upstream)
		if err != nil {
			return nil, err
		}
		// Its own client: lookups go straight to the API, never through
		// an HTTP_PROXY from the environment.
		id.Client = &http.Client{Transport: capgatehttp.NewTransport()}
		return id, nil
	case "header":
		if len(proxies) == 0 {
			return nil, errors.New("--identity header needs --trusted-proxies: the auth proxies whose X-Capgate-* headers to trust")
		}
		return identity.NewHeaderIdentity(splitList(opts.TrustedProxies))
	case "tokens":
		if opts.Tokens == "" {
			return nil, errors.New("--identity tokens needs --tokens FILE")
		}
		return loadTokens(opts.Tokens) // reloaded on SIGHUP
	}
	return nil, fmt.Errorf("--identity %q: use upstream, header or tokens", opts.Identity)
}

func parsePrefixes(list string) ([]netip.Prefix, error) {
	p, err := identity.ParseTrustedProxies(splitList(list))
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return p, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// requestReadTimeout bounds reading a whole request, body included: a
// client sending a byte a second can't hold a connection for ever.
const requestReadTimeout = 2 * time.Minute

// Serve serves the gateway on ln (and the admin handler on admin, if
// given) until ctx is done, then shuts down gracefully: it stops
// accepting, lets calls in flight finish for at most ShutdownTimeout (their
// leases are released as each one ends), and returns. Close the Server
// after it to drain the log sink.
func (s *Server) Serve(ctx context.Context, ln, admin net.Listener) error {
	newHTTP := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler: h,
			// Slow clients can't hold a connection open before or
			// while sending a request; a heavy call may then run for
			// many minutes, so there is no overall write timeout.
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       requestReadTimeout,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    s.maxHeaderBytes(),
			ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		}
	}
	servers := []*http.Server{newHTTP(s.Handler)}
	listeners := []net.Listener{ln}
	if admin != nil && s.Admin != nil {
		servers = append(servers, newHTTP(s.Admin))
		listeners = append(listeners, admin)
	}
	// The background loops: the config read (so the version in force
	// follows the store, and a database down at start is picked up) and
	// the stores' health checks. They stop when Serve returns.
	bctx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { s.Configs.Watch(bctx) })
	background.Go(func() { s.Health.Run(bctx) })
	if s.migrateLater {
		background.Go(func() { s.migrateInBackground(bctx) })
	}
	if s.Gate.Tuner != nil {
		background.Go(func() { s.Gate.Tuner.Run(bctx) })
	}
	defer func() {
		stopBackground()
		background.Wait()
	}()
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.logger.Info("shutting down", "timeout", s.opts.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(sctx); serr != nil {
			// Calls still running past the timeout: cut them; their
			// handlers release their leases as they return.
			s.logger.Warn("calls still in flight at the shutdown timeout; closing them", "error", serr)
			_ = srv.Close()
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// maxHeaderBytes is --max-header-bytes, or its default when unset.
func (s *Server) maxHeaderBytes() int {
	if s.opts.MaxHeaderBytes > 0 {
		return s.opts.MaxHeaderBytes
	}
	return capgatehttp.DefaultMaxHeaderBytes
}

// Close drains the log sink (2 s at most) and closes the stores.
func (s *Server) Close() error { return s.closeStores() }

func (s *Server) closeStores() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// advisedLimits returns the adaptive lanes' advised limits by lane name,
// for capgate_lane_advised_limit.
func (s *Server) advisedLimits() map[string]int {
	out := map[string]int{}
	if s.Gate == nil || s.Gate.Tuner == nil {
		return out
	}
	for lane, l := range s.Gate.Tuner.AdvisedLimits(context.Background()) {
		out[string(lane)] = l
	}
	return out
}
