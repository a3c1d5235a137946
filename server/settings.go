package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/config"
	"github.com/capgate/capgate/internal/migrate"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/postgres"
	"github.com/capgate/capgate/redis"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/sqlite"
)

// DefaultDatabase is where the config lives unless --database or
// CAPGATE_DATABASE say otherwise.
const DefaultDatabase = "sqlite:capgate.db"

// Settings are what the capgate commands share (README.md, Settings): where the
// config and the lanes live, the boot mode, and the limiter's timeouts.
// Every one has a flag; its default comes from the environment, under the
// original implementation's names, else the built-in default.
type Settings struct {
	// PolicyFile is the policy (--policy, CAPGATE_POLICY): which calls are
	// heavy, the lanes, tiers and names; "": the built-in policy.
	PolicyFile  string
	Database    string        // --database, CAPGATE_DATABASE: sqlite:<path> or postgres://…
	Mode        settings.Mode // --mode, CAPACITY_LIMIT_MODE: the defaults' mode; another word is an error (parseMode)
	CacheTTL    time.Duration // --config-cache, CAPACITY_CONFIG_CACHE_SECONDS (10); 0 reads on every call
	ReadTimeout time.Duration // --config-read-timeout, CAPACITY_CONFIG_READ_TIMEOUT_MS (500)

	Redis          string        // --redis, CAPGATE_REDIS_URL, or REDIS_HOST/REDIS_PORT/REDIS_DB/REDIS_PASSWORD; "" with no Sentinels: in-process lanes
	RedisSentinels string        // --redis-sentinels, REDIS_SENTINELS: "h:p;h:p"
	RedisMaster    string        // --redis-master, REDIS_SENTINELS_MASTER (default)
	RedisCluster   string        // --redis-cluster, CAPGATE_REDIS_CLUSTER: "h:p,h:p", any nodes of a Redis Cluster
	RedisPassword  string        // REDIS_PASSWORD: for the Sentinels' master, or a URL without one
	RedisTimeout   time.Duration // --redis-timeout, CAPACITY_REDIS_TIMEOUT_SECONDS (0.5)
	RedisDeadline  time.Duration // --redis-deadline, CAPACITY_REDIS_DEADLINE_SECONDS (1)
	RedisRetry     time.Duration // --redis-retry, CAPACITY_REDIS_RETRY_SECONDS (15)

	TaskID    string // --task-id, CAPACITY_TASK_ID: this API task's lane; default the hostname
	KeyPrefix string // --key-prefix, CAPGATE_KEY_PREFIX: the lane keys' prefix; "": the policy's (names.key_prefix)
	KeyLayout string // --key-layout, CAPGATE_KEY_LAYOUT: default or cluster; empty: cluster with --redis-cluster, else default
}

// LoadSettings reads the settings' environment variables through getenv
// (nil: os.Getenv) over the built-in defaults. It returns every value it
// can't read, joined.
func LoadSettings(getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	host, _ := os.Hostname()
	s := Settings{
		Database:      DefaultDatabase,
		Mode:          settings.ModeShadow,
		CacheTTL:      config.DefaultCacheTTL,
		ReadTimeout:   config.DefaultReadTimeout,
		RedisMaster:   redis.DefaultMasterName,
		RedisTimeout:  redis.DefaultTimeout,
		RedisDeadline: redis.DefaultDeadline,
		RedisRetry:    capgate.DefaultSkipDuration,
		TaskID:        host,
	}
	var errs []error
	str := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	dur := func(dst *time.Duration, name string, unit time.Duration) {
		v := getenv(name)
		if v == "" {
			return
		}
		d, err := ParseDuration(v, unit)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration such as 10s or 500ms, or a number of %s, 0 or more", name, v, unitName(unit)))
			return
		}
		*dst = d
	}
	str(&s.Database, "CAPGATE_DATABASE")
	str(&s.PolicyFile, "CAPGATE_POLICY")
	if v := getenv("CAPACITY_LIMIT_MODE"); v != "" {
		m, err := parseMode(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("CAPACITY_LIMIT_MODE=%w", err))
		}
		s.Mode = m
	}
	dur(&s.CacheTTL, "CAPACITY_CONFIG_CACHE_SECONDS", time.Second)
	dur(&s.ReadTimeout, "CAPACITY_CONFIG_READ_TIMEOUT_MS", time.Millisecond)
	str(&s.RedisPassword, "REDIS_PASSWORD")
	str(&s.Redis, "CAPGATE_REDIS_URL")
	if s.Redis == "" && getenv("REDIS_HOST") != "" {
		u, err := redisURL(getenv("REDIS_HOST"), getenv("REDIS_PORT"), getenv("REDIS_DB"), s.RedisPassword)
		if err != nil {
			errs = append(errs, err)
		}
		s.Redis = u
	}
	str(&s.RedisSentinels, "REDIS_SENTINELS")
	str(&s.RedisMaster, "REDIS_SENTINELS_MASTER")
	str(&s.RedisCluster, "CAPGATE_REDIS_CLUSTER")
	dur(&s.RedisTimeout, "CAPACITY_REDIS_TIMEOUT_SECONDS", time.Second)
	dur(&s.RedisDeadline, "CAPACITY_REDIS_DEADLINE_SECONDS", time.Second)
	dur(&s.RedisRetry, "CAPACITY_REDIS_RETRY_SECONDS", time.Second)
	str(&s.TaskID, "CAPACITY_TASK_ID")
	str(&s.KeyPrefix, "CAPGATE_KEY_PREFIX")
	str(&s.KeyLayout, "CAPGATE_KEY_LAYOUT")
	return s, JoinLine(errs)
}

// JoinLine joins errs on one line ("; "), so a setting that refuses to
// start says why in one line.
func JoinLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// redisURL builds redis://[:password@]host:port/db from the REDIS_*
// variables.
func redisURL(host, port, db, password string) (string, error) {
	if port == "" {
		port = "6379"
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("REDIS_PORT=%q: want a port number", port)
	}
	if db == "" {
		db = "0"
	}
	if n, err := strconv.Atoi(db); err != nil || n < 0 {
		return "", fmt.Errorf("REDIS_DB=%q: want a database number", db)
	}
	u := url.URL{Scheme: "redis", Host: net.JoinHostPort(host, port), Path: "/" + db}
	if password != "" {
		u.User = url.UserPassword("", password)
	}
	return u.String(), nil
}

// ConfigFlags registers every config setting on fs (what serve needs):
// StoreFlags and the request path's cache settings, defaulting to s's
// values.
func (s *Settings) ConfigFlags(fs *flag.FlagSet) {
	s.StoreFlags(fs)
	fs.Var(DurationValue{&s.CacheTTL, time.Second}, "config-cache", "how long a gateway keeps the config it read, a `duration` such as 10s or a number of seconds; 0 reads on every call (CAPACITY_CONFIG_CACHE_SECONDS)")
	fs.Var(DurationValue{&s.ReadTimeout, time.Millisecond}, "config-read-timeout", "bound of the config read on the request path, a `duration` such as 500ms or a number of milliseconds (CAPACITY_CONFIG_READ_TIMEOUT_MS)")
}

// PolicyFlag registers --policy on fs, defaulting to s's value.
func (s *Settings) PolicyFlag(fs *flag.FlagSet) {
	fs.StringVar(&s.PolicyFile, "policy", s.PolicyFile, "the policy `file` (YAML: routes, lanes, tiers, names; docs/POLICY.md); none: the built-in policy, "+policy.OCLFile+" (CAPGATE_POLICY)")
}

// LoadPolicy reads the policy file (PolicyFile), or returns the built-in
// policy when there is none. A file that does not parse is an error
// naming every problem, file:line: field.
func (s Settings) LoadPolicy() (*policy.Policy, error) {
	if s.PolicyFile == "" {
		return policy.OCL(), nil
	}
	p, err := policy.Load(s.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	return p, nil
}

// StoreFlags registers the config store and boot mode settings on fs
// (what the capacity CLI needs), defaulting to s's values.
func (s *Settings) StoreFlags(fs *flag.FlagSet) {
	s.PolicyFlag(fs)
	fs.StringVar(&s.Database, "database", s.Database, "where the config lives: sqlite:<path> (created if missing; relative to the current directory) or postgres://… (CAPGATE_DATABASE)")
	fs.Var(modeValue{&s.Mode}, "mode", "the defaults' `off|shadow|enforce` mode until staff change the config (CAPACITY_LIMIT_MODE)")
}

// CLIStoreFlags registers the config store and boot mode settings of the
// capacity CLI, which never makes a database unless asked (--create).
func (s *Settings) CLIStoreFlags(fs *flag.FlagSet) {
	s.PolicyFlag(fs)
	fs.StringVar(&s.Database, "database", s.Database, "the gateways' config database: sqlite:<path> (relative to the current directory) or postgres://… (CAPGATE_DATABASE)")
	fs.Var(modeValue{&s.Mode}, "mode", "the defaults' `off|shadow|enforce` mode, as the gateways were started with (CAPACITY_LIMIT_MODE)")
}

// LaneFlags registers the lane store settings on fs, defaulting to s's
// values.
func (s *Settings) LaneFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Redis, "redis", s.Redis, "the Redis of the lanes, redis://[:password@]host:port/db (CAPGATE_REDIS_URL, or REDIS_HOST, REDIS_PORT, REDIS_DB, REDIS_PASSWORD); none: in-process lanes")
	fs.StringVar(&s.RedisSentinels, "redis-sentinels", s.RedisSentinels, "Redis Sentinels, host:port;host:port (REDIS_SENTINELS)")
	fs.StringVar(&s.RedisMaster, "redis-master", s.RedisMaster, "the Sentinels' master name (REDIS_SENTINELS_MASTER)")
	fs.Var(DurationValue{&s.RedisTimeout, time.Second}, "redis-timeout", "Redis socket and connect timeout, a `duration` such as 500ms or a number of seconds (CAPACITY_REDIS_TIMEOUT_SECONDS)")
	fs.Var(DurationValue{&s.RedisDeadline, time.Second}, "redis-deadline", "the longest one Redis operation may take, a `duration` such as 1s or a number of seconds (CAPACITY_REDIS_DEADLINE_SECONDS)")
	fs.Var(DurationValue{&s.RedisRetry, time.Second}, "redis-retry", "how long to skip Redis after it failed, a `duration` such as 15s or a number of seconds (CAPACITY_REDIS_RETRY_SECONDS)")
	fs.StringVar(&s.TaskID, "task-id", s.TaskID, "this API task's lane name (CAPACITY_TASK_ID; default the hostname)")
	fs.StringVar(&s.KeyPrefix, "key-prefix", s.KeyPrefix, "the lane keys' prefix (CAPGATE_KEY_PREFIX; default: the policy's names.key_prefix)")
	fs.StringVar(&s.RedisCluster, "redis-cluster", s.RedisCluster, "a Redis Cluster, host:port,host:port (any of its nodes) (CAPGATE_REDIS_CLUSTER); implies --key-layout cluster")
	fs.StringVar(&s.KeyLayout, "key-layout", s.KeyLayout, "the lane keys' layout: default (<prefix>:<lane>, the original's) or cluster ({<prefix>}:<lane>, one hash slot) (CAPGATE_KEY_LAYOUT; default: cluster with --redis-cluster, else default)")
}

// HasRedis reports whether the lanes live in Redis (standalone, Sentinel
// or a cluster), rather than in-process.
func (s Settings) HasRedis() bool {
	return s.Redis != "" || s.RedisSentinels != "" || s.RedisCluster != ""
}

// KeyPrefixOf returns the lane keys' prefix before the key layout:
// KeyPrefix, else the key prefix of policy p.
func (s Settings) KeyPrefixOf(p *policy.Policy) string {
	if s.KeyPrefix != "" {
		return s.KeyPrefix
	}
	return p.Names.KeyPrefix
}

// LaneKeyPrefix returns the prefix of the lane keys of policy p under the
// key layout: KeyPrefixOf(p) as is for the default layout, wrapped in a
// hash tag for the cluster layout (the default with a Redis Cluster). It
// refuses the default layout on a cluster, where a call's lanes would land
// in different slots.
func (s Settings) LaneKeyPrefix(p *policy.Policy) (string, error) {
	layout := redis.KeyLayoutDefault
	if s.RedisCluster != "" {
		layout = redis.KeyLayoutCluster
	}
	if s.KeyLayout != "" {
		l, err := redis.ParseKeyLayout(s.KeyLayout)
		if err != nil {
			return "", fmt.Errorf("--key-layout: %w", err)
		}
		layout = l
	}
	if s.RedisCluster != "" && layout != redis.KeyLayoutCluster {
		return "", errors.New("--key-layout default can't be used with --redis-cluster: a call's lanes must share one hash slot there; use --key-layout cluster (the default with a cluster)")
	}
	prefix, err := layout.Prefix(s.KeyPrefixOf(p))
	if err != nil {
		return "", fmt.Errorf("--key-prefix: %w", err)
	}
	return prefix, nil
}

// RedisOptions returns the Redis lane store's options.
func (s Settings) RedisOptions() redis.Options {
	o := redis.Options{URL: s.Redis, MasterName: s.RedisMaster, Password: s.RedisPassword,
		Timeout: s.RedisTimeout, Deadline: s.RedisDeadline}
	if s.RedisSentinels != "" {
		o.URL = ""
		for _, a := range strings.Split(s.RedisSentinels, ";") {
			if a = strings.TrimSpace(a); a != "" {
				o.Sentinels = append(o.Sentinels, a)
			}
		}
	}
	if s.RedisCluster != "" {
		o.URL, o.Sentinels = "", nil
		o.Cluster = splitList(s.RedisCluster)
	}
	return o
}

// OpenConfigStore opens the config store that database names:
// sqlite:<path> or postgres://… (postgresql:// too), and brings its schema
// up to date.
func OpenConfigStore(ctx context.Context, database string) (config.Store, error) {
	return migrate.Open(ctx, ConnectConfigStore, database)
}

// MigratingStore is a config store that can bring its own schema up to
// date.
type MigratingStore interface {
	config.Store
	// Migrate applies the schema migrations the database lacks.
	Migrate(ctx context.Context) error
	// DatabaseVersion returns the database's schema version, 0 when
	// capgate's tables are not there.
	DatabaseVersion(ctx context.Context) (int, error)
}

// ConnectConfigStore returns the config store that database names without
// touching the database: one that is down is not an error here, and
// nothing is migrated. It fails only for a database it can't name.
func ConnectConfigStore(ctx context.Context, database string) (MigratingStore, error) {
	switch {
	case strings.HasPrefix(database, "sqlite:"):
		return sqlite.Connect(ctx, SQLitePath(database))
	case strings.HasPrefix(database, "postgres://"), strings.HasPrefix(database, "postgresql://"):
		return postgres.Connect(ctx, database)
	}
	scheme, _, _ := strings.Cut(database, ":")
	return nil, fmt.Errorf("--database %q: use sqlite:<path> or postgres://…", scheme)
}

// SQLitePath is the file of a sqlite: database, "" for another scheme.
func SQLitePath(database string) string {
	if !strings.HasPrefix(database, "sqlite:") {
		return ""
	}
	return strings.TrimPrefix(strings.TrimPrefix(database, "sqlite:"), "//")
}

// LatestSchema is the newest schema version this capgate knows for
// database.
func LatestSchema(database string) int {
	if SQLitePath(database) != "" {
		return sqlite.SchemaVersion()
	}
	return postgres.SchemaVersion()
}

// NewConfigService returns the config service of these settings over
// store.
func (s Settings) NewConfigService(store config.Store, p *policy.Policy) *config.Service {
	svc := config.NewService(store, s.Mode)
	svc.Policy = p
	svc.CacheTTL, svc.ReadTimeout = s.CacheTTL, s.ReadTimeout
	if s.CacheTTL == 0 {
		svc.CacheTTL = -1 // 0 means no caching here; the service's 0 means its default
	}
	return svc
}
