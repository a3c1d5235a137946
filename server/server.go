package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/adaptive"
	"github.com/capgate/capgate/config"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/loop"
	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/metrics"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/postgres"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/status"
)

// ServeOptions are the settings of capgate serve beyond the shared ones.
type ServeOptions struct {
	Settings
	Listen          string        // --listen, CAPGATE_LISTEN
	AdminListen     string        // --admin-listen, CAPGATE_ADMIN_LISTEN: staff API, metrics and health only there
	Upstream        string        // --upstream, CAPGATE_UPSTREAM (required)
	Identity        string        // --identity, CAPGATE_IDENTITY: upstream, header, tokens or jwt; "": the policy's
	Tokens          string        // --tokens, CAPGATE_TOKENS: the tokens file
	JWKS            string        // --jwks, CAPGATE_JWKS: the JSON Web Key Set of --identity jwt
	TrustedProxies  string        // --trusted-proxies, CAPGATE_TRUSTED_PROXIES: comma-separated CIDRs
	PathPrefix      string        // --path-prefix, CAPGATE_PATH_PREFIX
	MaxBodyBytes    int64         // --max-body-bytes, CAPGATE_MAX_BODY_BYTES
	CORSOrigins     string        // --cors-origins, CAPGATE_CORS_ORIGINS: comma-separated; empty: echo Origin
	LogFile         string        // --log-file, CAPGATE_LOG_FILE: the per-call log lines; empty: stdout
	ShutdownTimeout time.Duration // --shutdown-timeout, CAPGATE_SHUTDOWN_TIMEOUT
	DrainDelay      time.Duration // --drain-delay, CAPGATE_DRAIN_DELAY: /readyz fails this long before the listener closes
	// RestartHold (--restart-hold, CAPGATE_RESTART_HOLD, default
	// journal.DefaultHold): with Redis, how long after start the gateway
	// releases at the earliest the leases a dead predecessor left
	// (journal.Options.Hold).
	RestartHold time.Duration
	// Force, when closed, ends a shutdown at once (a second signal): calls
	// in flight are cut and their leases released. Default nil: never.
	Force      <-chan struct{}
	CoreGroup  string // --core-group
	EarlyGroup string // --early-access-group
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
	ObserveOptions // --metrics-token, --staff-tokens, --access-log (observe.go)

	SkipMigrate bool   // --migrate=false, CAPGATE_MIGRATE=false: leave the schema to capgate migrate
	LogFormat   string // --log-format, CAPGATE_LOG_FORMAT: text (default) or json

	// Decide serves the decision protocol beside the gateway
	// (--decide-listen, --decide-token, --decide-no-token).
	Decide DecideOptions
}

// Server is one running capgate gateway: its stores, gate and handlers.
// Build it with NewServer, run it with Serve, and Close it.
type Server struct {
	Gate *capgate.Gate
	// Repeater is the process's idempotency over Gate, shared by the
	// gateway and a decision service beside it (StartDecide).
	Repeater *idempotency.Repeater
	Configs  *config.Service
	Lanes    capgate.LaneStore
	Sink     *logsink.Sink
	Handler  http.Handler // the gateway (and, without AdminListen, the staff API, /metrics, the probes)
	Gateway  *capgatehttp.Gateway
	Admin    http.Handler // the staff API, /metrics and the probes, when AdminListen is set
	Health   *capgatehttp.Health

	opts    ServeOptions
	logger  *slog.Logger
	recent  *status.Recent // this gateway's decisions of the last 15 minutes, for the status
	closers []func() error
	store   MigratingStore
	// policy is the policy in force (--policy, reloaded on SIGHUP), and
	// classifier the gateway's, which evaluates it.
	policy     *policy.Policy
	classifier *capgatehttp.Classifier
	logFile    *reopenFile      // --log-file, reopened on SIGHUP
	tokens     *reloadingTokens // --identity tokens, reloaded on SIGHUP
	jwks       *identity.JWT    // --identity jwt: its --jwks file, reloaded on SIGHUP
	// staffTokens (--staff-tokens) and accessFile (--access-log) are
	// reloaded and reopened on SIGHUP.
	staffTokens *reloadingTokens
	accessFile  *reopenFile
	// pushes are the channels config changes are announced on (Redis
	// pub/sub, PostgreSQL LISTEN): Serve follows each.
	pushes []config.Subscriber
	// adaptive runs the gate's adaptive limits (startBackground) and
	// reads them for the metrics.
	adaptive *adaptive.Runner
	// metrics and registry are the gate's metrics and where they are
	// registered (openCore).
	metrics  *metrics.Metrics
	registry *prometheus.Registry
	draining atomic.Bool // set at shutdown: /readyz answers 503
	inFlight sync.WaitGroup
	running  atomic.Int64 // requests being served
	// idle gets a value (never blocking) when running drops to 0, for the
	// drain (drain.go); lastProbe is when a GET /readyz last came (Unix
	// nanoseconds, 0: never).
	idle      chan struct{}
	lastProbe atomic.Int64
	// migrateLater is set when the migration at start failed (the
	// database was down): Serve retries it in the background.
	migrateLater bool
	// cutCtx is done when Serve stops waiting for the calls in flight
	// (cutCalls): the gateway cuts those still running
	// (GatewayConfig.Shutdown), and every request's context derives from
	// it.
	cutCtx   context.Context
	cutCalls context.CancelFunc
}

// NewServer opens the stores and builds the gateway of opts. lines
// receives the per-call log lines when opts.LogFile is empty. It returns
// an error for an invalid setting; an upstream that is down is not one.
func NewServer(ctx context.Context, opts ServeOptions, lines io.Writer, logger *slog.Logger) (_ *Server, err error) {
	s := &Server{opts: opts, logger: logger, idle: make(chan struct{}, 1)}
	s.cutCtx, s.cutCalls = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			s.cutCalls()
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
	if opts.RestartHold < 0 {
		return nil, fmt.Errorf("--restart-hold %v: want 0 or more", opts.RestartHold)
	}
	proxies, err := parsePrefixes(opts.TrustedProxies)
	if err != nil {
		return nil, err
	}

	if err := s.openCore(ctx, lines, "gateway"); err != nil {
		return nil, err
	}
	m, reg := s.metrics, s.registry

	// The identity in force: --identity, else the policy's resolver.
	opts.Identity = opts.IdentityOf(s.policy)
	s.opts.Identity = opts.Identity
	ids, err := newIdentity(opts, proxies, s.policy)
	if err != nil {
		return nil, err
	}
	switch t := ids.(type) {
	case *reloadingTokens:
		s.tokens = t
	case *identity.JWT:
		s.jwks = t
	}
	// The staff endpoints take the static staff tokens before asking ids,
	// so they keep working while the API (the upstream identity) is down.
	staffIDs := ids
	if opts.StaffTokens != "" {
		if s.staffTokens, err = loadStaffTokens(opts.StaffTokens); err != nil {
			return nil, err
		}
		staffIDs = identity.NewStaff(s.staffTokens, ids)
	}
	staff := capgatehttp.NewStaffHandler(s.Configs, staffIDs)
	staff.Status = s.status
	staff.Logger = logger
	staff.Health = s.Health
	s.classifier = &capgatehttp.Classifier{PathPrefix: opts.PathPrefix, MaxBodyBytes: opts.MaxBodyBytes, Oversize: m.OversizeBody,
		Budget: capgatehttp.NewBudget(opts.MaxBufferedBytes), BufferFull: m.BufferFull}
	s.classifier.SetPolicy(s.policy)
	gcfg := capgatehttp.GatewayConfig{
		Upstream:       up,
		Gate:           s.Gate,
		Identify:       ids,
		Classifier:     s.classifier,
		TrustedProxies: proxies,
		UpgradePaths:   splitList(opts.UpgradePaths),
		PublicMetrics:  opts.PublicMetrics,
		MetricsToken:   opts.MetricsToken,
		StaffIdentify:  staffIDs,
		Shutdown:       s.cutCtx,
		Observer:       m,
		Logger:         logger,
		Options: []capgatehttp.Option{
			capgatehttp.WithCORSOrigins(splitList(opts.CORSOrigins)),
			capgatehttp.WithRepeater(s.Repeater),
		},
	}
	// Redis: the calls' leases are journalled, so that once this gateway
	// is dead another of its task id and --listen releases them.
	if gcfg.Journal, err = s.openJournal(ctx, "gateway:"+opts.TaskID+":"+opts.Listen, opts.RestartHold); err != nil {
		return nil, err
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
	s.Handler, s.Gateway = gw, gw
	return s, nil
}

// startMigrateTimeout bounds the migration tried at start: a database
// that doesn't answer by then is migrated in the background.
const startMigrateTimeout = 5 * time.Second

// openCore opens what the gateway and the decision service share: the log
// sink, the lanes, the config store and service (with its pushes), the
// health checks, the gate and its metrics. who names the process in the
// warnings. On an error the caller closes what was opened (closeStores).
func (s *Server) openCore(ctx context.Context, lines io.Writer, who string) error {
	logger := s.logger
	if s.opts.TaskID == "" {
		// One shared api_heavy_task lane would make the per-task limit act
		// cluster-wide and hide this process from the degraded limits.
		return fmt.Errorf("--task-id is empty (CAPACITY_TASK_ID; default the hostname): each %s needs a task id of its own", who)
	}
	// The log sink first: the config service writes its change lines there.
	if s.opts.LogFile != "" {
		f, err := openLogFile(s.opts.LogFile)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
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

	pol, err := s.opts.LoadPolicy()
	if err != nil {
		return err
	}
	if pol, err = s.opts.tierGroups(pol); err != nil {
		return err
	}
	s.policy = pol
	keyPrefix, err := s.opts.LaneKeyPrefix(pol)
	if err != nil {
		return err
	}
	if s.opts.HasRedis() {
		ro := s.opts.RedisOptions()
		ro.KeyPrefix = keyPrefix // the store checks it (and tags it on a cluster)
		rs, err := redis.Open(ro)
		if err != nil {
			return fmt.Errorf("redis lanes: %w", err)
		}
		s.closers = append(s.closers, rs.Close)
		// A Redis that refuses these settings for good (DB index, password,
		// cluster mode) would fail open for ever: refuse to start instead.
		// One that does not answer is no error here.
		if err := rs.CheckConfig(ctx); err != nil {
			return fmt.Errorf("--redis %s: %w", rs, err)
		}
		s.Lanes = rs
		logger.Info("lanes in Redis", "redis", rs.String())
	} else {
		s.Lanes = memory.New(nil)
		logger.Warn("lanes are in-process: they count this " + who + " only; with more than one set --redis, --redis-sentinels or --redis-cluster")
	}

	if err := checkSQLiteDir(s.opts.Database); err != nil {
		return err
	}
	cstore, err := ConnectConfigStore(ctx, s.opts.Database)
	if err != nil {
		return fmt.Errorf("config store: %w", err)
	}
	s.closers = append(s.closers, cstore.Close)
	s.store = cstore
	if err := s.prepareSchema(ctx); err != nil {
		return err
	}
	s.Configs = s.opts.NewConfigService(cstore, pol)
	s.Configs.Sink = s.Sink
	s.Configs.Logger = logger
	// Changes are pushed: through PostgreSQL NOTIFY where the config is
	// (the store notifies its own), SQLite's commit counter for a file on
	// this host, and Redis pub/sub where the lanes are; the poll (Watch)
	// stays the fallback.
	if sub, ok := cstore.(config.Subscriber); ok {
		s.pushes = append(s.pushes, sub)
	}
	if rs, ok := s.Lanes.(*redis.Store); ok {
		ch := redis.NewConfigChannel(rs, s.opts.KeyPrefixOf(pol))
		s.pushes = append(s.pushes, ch)
		s.Configs.Notifiers = append(s.Configs.Notifiers, ch)
	}

	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
		// Draining, the gateway still serves but asks to be taken out of
		// the load balancer first.
		Ready:  func() bool { return !s.draining.Load() && s.Configs.ReadState().Ready },
		Probed: s.probed,
	}
	if s.Gate, err = capgate.NewGate(s.Lanes, s.Configs, s.Sink, s.opts.TaskID); err != nil {
		return err
	}
	s.adaptive = &adaptive.Runner{Gate: s.Gate}
	s.recent = status.NewRecent(nil)
	// The lane gauges are read from the store at scrape time, through the
	// gate's keys (WithLanes), so they read 0 once the load stops.
	s.metrics, err = metrics.New(s.registry, metrics.WithLogDropped(s.Sink.Dropped), metrics.WithConfigVersion(s.Configs.Version),
		metrics.WithStoreUp(s.Health.Up, "lanes", "config"), metrics.WithBuildInfo(Version(), revision()),
		metrics.WithLanes(s.Gate, s.Configs), metrics.WithAdvisedLimits(s.advisedLimits), metrics.WithRecent(s.recent),
		metrics.WithAdaptiveStepAges(s.adaptiveStepAges), metrics.WithPolicy(pol))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	s.Gate.KeyPrefix = keyPrefix
	s.Gate.SkipFor = s.opts.RedisRetry
	s.Gate.Logger = logger
	s.Gate.Observer = s.metrics
	if s.opts.HasRedis() && s.opts.LocalLanes {
		s.Gate.Local = memory.New(nil)
	}
	s.Repeater = idempotency.New(s.Gate)
	// Before the stores close: the last try at releases still pending.
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), s.storeDeadline())
		defer cancel()
		return s.Gate.Close(ctx)
	})

	return nil
}

// storeDeadline is the lane store's deadline of one operation: its own
// (redis.Options.Deadline), else the gate's default, as in the gate.
func (s *Server) storeDeadline() time.Duration {
	if s.Lanes != nil {
		if d := s.Lanes.Caps().Deadline; d > 0 {
			return d
		}
	}
	return capgate.DefaultStoreDeadline
}

// prepareSchema migrates the config database at start (unless --migrate
// =false). A database that is down is not fatal: the gateway serves on
// the defaults (enforce as shadow) and migrates in the background once it
// answers. With --migrate=false it only warns when the schema is behind.
// It fails only for a database that refuses the settings for good (a
// PostgreSQL password or database that is wrong).
func (s *Server) prepareSchema(ctx context.Context) error {
	if p := SQLitePath(s.opts.Database); p != "" {
		if abs, err := filepath.Abs(p); err == nil {
			s.logger.Info("config in SQLite", "path", abs)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startMigrateTimeout)
	defer cancel()
	if s.opts.SkipMigrate {
		have, err := s.store.DatabaseVersion(ctx)
		switch {
		case postgres.IsConfigError(err):
			return fmt.Errorf("--database %s: %w", MaskURL(s.opts.Database), err)
		case err != nil:
			s.logger.Warn("config database not readable at start; serving on the defaults until it is", "error", err)
		case have < LatestSchema(s.opts.Database):
			s.logger.Warn("config database schema is behind and --migrate=false: run capgate migrate; serving on the defaults until then",
				"have", have, "want", LatestSchema(s.opts.Database))
		}
		return nil
	}
	if err := s.store.Migrate(ctx); err != nil {
		if postgres.IsConfigError(err) {
			return fmt.Errorf("--database %s: %w", MaskURL(s.opts.Database), err)
		}
		s.logger.Warn("config database not ready at start; serving on the defaults (enforce as shadow), migrating in the background",
			"error", err)
		s.migrateLater = true
	}
	return nil
}

// checkSQLiteDir refuses a sqlite: database whose directory does not exist:
// the file can never be made there, so it is no outage to wait out.
func checkSQLiteDir(database string) error {
	p := SQLitePath(database)
	if p == "" {
		return nil
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--database %s: the directory %s does not exist", database, dir)
	case err == nil && !fi.IsDir():
		return fmt.Errorf("--database %s: %s is not a directory", database, dir)
	}
	return nil
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

// newIdentity returns the identity resolver of --identity, or, when it is
// not given, of the policy's identity.resolver.
func newIdentity(opts ServeOptions, proxies []netip.Prefix, p *policy.Policy) (identity.Identifier, error) {
	resolver := opts.IdentityOf(p)
	switch resolver {
	case "upstream", "":
		id, err := identity.NewUpstream(opts.Upstream)
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
		return identity.NewHeader(splitList(opts.TrustedProxies))
	case "tokens":
		if opts.Tokens == "" {
			return nil, errors.New("--identity tokens needs --tokens FILE")
		}
		return loadTokens(opts.Tokens) // reloaded on SIGHUP
	case "jwt":
		if opts.JWKS == "" {
			return nil, errors.New("--identity jwt needs --jwks FILE: the JSON Web Key Set the tokens are signed with")
		}
		if p.Identity.JWT == nil {
			return nil, fmt.Errorf("--identity jwt: policy %s has no identity.jwt (issuer, audience, claims)", p.Name)
		}
		pj := p.Identity.JWT
		return identity.NewJWT(identity.JWTOptions{JWKSFile: opts.JWKS, Issuer: pj.Issuer, Audience: pj.Audience,
			UserClaim: pj.UserClaim, GroupsClaim: pj.GroupsClaim, StaffClaim: pj.StaffClaim}) // reloaded on SIGHUP
	}
	return nil, fmt.Errorf("--identity %q: use upstream, header, tokens or jwt", resolver)
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

// ErrCut is what Serve returns when calls were still running at the
// shutdown timeout (or a second signal) and were cut: the exit code is 1.
var ErrCut = errors.New("calls cut at shutdown")

// DefaultDrainDelay is how long /readyz fails before the listener closes.
const DefaultDrainDelay = 5 * time.Second

// Serve serves the gateway on ln (and the admin handler on admin, if
// given) until ctx is done, then shuts down: /readyz answers 503 for
// DrainDelay while the listeners still serve (so load balancers take the
// gateway out first: the whole delay while a readiness probe watches,
// else only while calls are in flight; see drain), then it stops accepting and lets calls in flight
// finish for at most ShutdownTimeout (their leases are released as each
// one ends). Calls still running then are cut: each writes its line with
// error "shutdown" and releases its leases, and Serve returns an error
// wrapping ErrCut. Force, when closed, skips the waits and cuts at once.
// Close the Server after it to drain the log sink.
func (s *Server) Serve(ctx context.Context, ln, admin net.Listener) error {
	// Cancelled when the gateway stops waiting for calls in flight: the
	// gateway cuts them (GatewayConfig.Shutdown), and each request's
	// context derives from it.
	defer s.cutCalls()
	base := s.cutCtx
	newHTTP := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler: s.track(h),
			// Slow clients can't hold a connection open before or
			// while sending a request; a heavy call may then run for
			// many minutes, so there is no overall write timeout.
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       requestReadTimeout,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    s.maxHeaderBytes(),
			ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
			BaseContext:       func(net.Listener) context.Context { return base },
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
	defer s.startBackground(ctx)()
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	force := s.opts.Force
	forced := func() bool {
		select {
		case <-force:
			return true
		default:
			return false
		}
	}
	s.draining.Store(true)
	if err == nil && s.opts.DrainDelay > 0 {
		s.drain(force)
	}
	s.logger.Info("shutting down", "timeout", s.opts.ShutdownTimeout.String(), "in_flight", s.running.Load())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	if force != nil {
		go func() {
			select {
			case <-force:
				cancel()
			case <-sctx.Done():
			}
		}()
	}
	var shut sync.WaitGroup
	var timedOut atomic.Bool
	for _, srv := range servers {
		shut.Go(func() {
			if serr := srv.Shutdown(sctx); serr != nil {
				timedOut.Store(true)
			}
		})
	}
	shut.Wait()
	if timedOut.Load() || forced() {
		n := s.running.Load()
		why := "the shutdown timeout"
		if forced() {
			why = "a second signal"
		}
		s.logger.Warn("calls still in flight; cutting them: each writes its line with error shutdown and releases its leases",
			"calls", n, "after", why)
		s.cutCalls()
		s.awaitCut()
		for _, srv := range servers {
			_ = srv.Close()
		}
		if n > 0 {
			return fmt.Errorf("%w: %d call(s) still running after %s", ErrCut, n, why)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// startBackground starts the background loops of a serving process: the
// config read (so the version in force follows the store, and a database
// down at start is picked up) and the pushes it follows, the stores' health
// checks, a migration left for later, and the adaptive limits. The func it
// returns stops them and waits for them.
func (s *Server) startBackground(ctx context.Context) (stop func()) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { s.Configs.Watch(bctx) })
	for _, p := range s.pushes {
		background.Go(func() { s.Configs.Follow(bctx, p) })
	}
	background.Go(func() { s.Health.Run(bctx) })
	if s.migrateLater {
		background.Go(func() { s.migrateInBackground(bctx) })
	}
	// The adaptive limits: idle unless the config has an "adaptive" key
	// (it returns at once, with a warning, if the lane store keeps no
	// adaptive state).
	background.Go(func() { s.adaptive.Run(bctx) })
	return func() {
		cancel()
		background.Wait()
	}
}

// maxHeaderBytes is --max-header-bytes, or its default when unset.
func (s *Server) maxHeaderBytes() int {
	if s.opts.MaxHeaderBytes > 0 {
		return s.opts.MaxHeaderBytes
	}
	return capgatehttp.DefaultMaxHeaderBytes
}

// track counts the requests being served, so a shutdown can wait for the
// calls it cut to release their leases.
func (s *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inFlight.Add(1)
		s.running.Add(1)
		defer func() {
			if s.running.Add(-1) == 0 {
				select {
				case s.idle <- struct{}{}:
				default:
				}
			}
			s.inFlight.Done()
		}()
		h.ServeHTTP(w, r)
	})
}

// awaitCut waits for the handlers of the calls just cut to return, which
// release their leases: at most the store's deadline twice (a release,
// and the upstream request's end), plus a second.
func (s *Server) awaitCut() {
	d := s.opts.RedisDeadline
	if d <= 0 {
		d = capgate.DefaultStoreDeadline
	}
	done := make(chan struct{})
	go func() {
		s.inFlight.Wait()
		close(done)
	}()
	t := time.NewTimer(2*d + time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.logger.Warn("calls cut at shutdown did not all end in time; their leases expire on their own", "calls", s.running.Load())
	}
}

// status is the staff API's GET /capacity/status/: the lanes' live state
// (the lane calls wait on among it) and this gateway's decisions of the
// last 1, 5 and 15 minutes.
func (s *Server) status(ctx context.Context, cfg settings.Config) status.Snapshot {
	st := s.Gate.Status(ctx, cfg)
	st.Decisions = s.recent.Decisions()
	return st
}

// Close drains the log sink (2 s at most) and closes the stores.
func (s *Server) Close() error {
	if s.cutCalls != nil { // nil for decide's core, which serves no gateway
		s.cutCalls()
	}
	return s.closeStores()
}

func (s *Server) closeStores() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// adaptiveStepAges returns the age of each adaptive lane's last step, in
// seconds, by lane name, for capgate_adaptive_last_step_age_seconds.
func (s *Server) adaptiveStepAges() map[string]float64 {
	out := map[string]float64{}
	if s.adaptive == nil {
		return out
	}
	for lane, d := range s.adaptive.StepAges(context.Background()) {
		out[string(lane)] = d.Seconds()
	}
	return out
}

// advisedLimits returns the adaptive lanes' advised limits by lane name,
// for capgate_lane_advised_limit.
func (s *Server) advisedLimits() map[string]int {
	out := map[string]int{}
	if s.adaptive == nil {
		return out
	}
	for lane, l := range s.adaptive.Advised(context.Background()) {
		out[string(lane)] = l
	}
	return out
}

// IdentityOf returns the identity resolver in force under policy p:
// --identity, else p's identity.resolver.
func (o ServeOptions) IdentityOf(p *policy.Policy) string {
	if o.Identity != "" {
		return o.Identity
	}
	return p.Identity.Resolver
}

// tierGroups returns p with the tier groups of --core-group and
// --early-access-group, when given, in place of its own.
func (o ServeOptions) tierGroups(p *policy.Policy) (*policy.Policy, error) {
	for _, g := range []struct{ flag, tier, group string }{
		{"--core-group", "core", o.CoreGroup}, {"--early-access-group", "early_access", o.EarlyGroup},
	} {
		if g.group == "" {
			continue
		}
		q, err := p.WithTierGroups(g.tier, []string{g.group})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.flag, err)
		}
		p = q
	}
	return p, nil
}

// Identity is the caller identification in force: --identity, else the
// policy's resolver.
func (s *Server) Identity() string { return s.opts.Identity }

// Options are the options the server was built with.
func (s *Server) Options() ServeOptions { return s.opts }
