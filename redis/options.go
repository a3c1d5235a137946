package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of Options.
const (
	// DefaultMasterName is the Sentinel master name (REDIS_SENTINELS_MASTER).
	DefaultMasterName = "default"
	// DefaultTimeout is the socket and connect timeout
	// (CAPACITY_REDIS_TIMEOUT_SECONDS).
	DefaultTimeout = 500 * time.Millisecond
	// DefaultDeadline is the overall deadline of one operation, queue wait,
	// DNS and Sentinel discovery included (CAPACITY_REDIS_DEADLINE_SECONDS).
	DefaultDeadline = time.Second
	// DefaultMaxInFlight is how many operations a Store sends at once.
	DefaultMaxInFlight = 32
	// DefaultMaxQueued is how many operations wait in order for one of
	// those slots; more wait for a place in the queue, up to the deadline
	// (then capgate.ErrBusy).
	DefaultMaxQueued = 8
)

// Options say where the lanes live and how long the limiter may wait for
// them. The zero value of every field but the address means its default.
type Options struct {
	// URL is a standalone Redis: redis://[[user]:password@]host:port[/db]
	// (rediss:// for TLS). Set one of URL, Sentinels and Cluster.
	URL string
	// Sentinels are the host:port addresses of the Sentinels that know the
	// master; MasterName names it. Default DefaultMasterName.
	Sentinels  []string
	MasterName string
	// Cluster are host:port addresses of Redis Cluster nodes (any of them;
	// the client learns the rest). A cluster has only database 0, and the
	// lane keys must share one hash slot (KeyLayoutCluster).
	Cluster []string
	// Password authenticates to the master and to the Sentinels, or to
	// every cluster node. With URL
	// it fills in a password the URL leaves out.
	Password string
	// DB is the database number. With URL it fills in a db the URL leaves
	// out. Default 0.
	DB int

	// KeyPrefix is the prefix of the lane keys, which the store gives the
	// gate (Store.KeyPrefix, read by capgate.NewGate). Default: none, the
	// gate's policy's (names.key_prefix); the store's own keys (the
	// journal, idempotency) then go under policy.DefaultKeyPrefix. On a
	// Redis Cluster (default there: policy.DefaultKeyPrefix) the store
	// wraps it in a hash tag (KeyLayoutCluster) unless it has one, so a
	// call's keys share one slot, and refuses keys that don't.
	KeyPrefix string

	// Timeout is the socket read, write and connect timeout of every
	// connection, Sentinel connections included. Default DefaultTimeout.
	Timeout time.Duration
	// Deadline bounds each operation from the call to the answer, however
	// the time is spent. Default DefaultDeadline.
	Deadline time.Duration
	// MaxInFlight bounds the operations sent at once (and the connection
	// pool). Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxQueued bounds the operations waiting in order for a slot; more
	// wait for a place in the queue until the deadline. Default
	// DefaultMaxQueued; negative: no queue, a call that finds every slot
	// taken fails at once with capgate.ErrBusy.
	MaxQueued int
}

// withDefaults returns o with defaults in place of zero values, or an error
// when o is not usable.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	set := 0
	for _, on := range []bool{o.URL != "", len(o.Sentinels) > 0, len(o.Cluster) > 0} {
		if on {
			set++
		}
	}
	if set > 1 {
		errs = append(errs, errors.New("set one of a Redis URL, Sentinels and a Redis Cluster"))
	}
	if len(o.Cluster) > 0 && o.DB != 0 {
		errs = append(errs, fmt.Errorf("db %d: a Redis Cluster has only database 0", o.DB))
	}
	if o.MasterName == "" {
		o.MasterName = DefaultMasterName
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Deadline == 0 {
		o.Deadline = DefaultDeadline
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case o.MaxQueued == 0:
		o.MaxQueued = DefaultMaxQueued
	case o.MaxQueued < 0:
		o.MaxQueued = 0
	}
	if o.Timeout < 0 || o.Deadline < 0 {
		errs = append(errs, fmt.Errorf("timeout %v and deadline %v must be positive", o.Timeout, o.Deadline))
	}
	if o.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("max in flight %d must be positive", o.MaxInFlight))
	}
	if o.DB < 0 {
		errs = append(errs, fmt.Errorf("db %d must not be negative", o.DB))
	}
	return o, errors.Join(errs...)
}

// clientOptions returns the options of the limiter's own client for a
// standalone Redis. Requires o.withDefaults and o.URL set.
func (o Options) clientOptions() (*goredis.Options, error) {
	co, err := goredis.ParseURL(o.URL)
	if err != nil {
		// The parser's error may quote the URL, password included.
		return nil, fmt.Errorf("parse Redis URL %s: not a redis:// or rediss:// URL", o.String())
	}
	if co.Password == "" {
		co.Password = o.Password
	}
	if u, err := url.Parse(o.URL); err == nil && strings.Trim(u.Path, "/") == "" {
		co.DB = o.DB
	}
	co.MaxRetries = -1   // a failed call fails open; never retried
	co.DialerRetries = 1 // one dial per connection (≤ 0 would mean 5)
	co.DialTimeout = o.Timeout
	co.ReadTimeout = o.Timeout
	co.WriteTimeout = o.Timeout
	co.ContextTimeoutEnabled = true // the operation deadline bounds the socket too
	co.PoolSize = o.MaxInFlight
	co.PoolTimeout = o.Deadline
	co.Protocol = 2           // plain RESP2: no HELLO, no push notifications
	co.DisableIdentity = true // no CLIENT SETINFO on connect
	co.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return co, nil
}

// failoverOptions returns the options of the limiter's own client for a
// master found through Sentinels. Requires o.withDefaults.
func (o Options) failoverOptions() *goredis.FailoverOptions {
	return &goredis.FailoverOptions{
		MasterName:            o.MasterName,
		SentinelAddrs:         o.Sentinels,
		SentinelPassword:      o.Password,
		Password:              o.Password,
		DB:                    o.DB,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           o.Timeout,
		ReadTimeout:           o.Timeout,
		WriteTimeout:          o.Timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              o.MaxInFlight,
		PoolTimeout:           o.Deadline,
		Protocol:              2,
		DisableIdentity:       true,
	}
}

// clusterOptions returns the options of the limiter's own Redis Cluster
// client. Requires o.withDefaults. It follows MOVED and ASK redirects (up
// to clusterRedirects, within the operation deadline), but like the other
// clients it never resends a command that failed on the network: see
// newClusterNode.
func (o Options) clusterOptions() *goredis.ClusterOptions {
	return &goredis.ClusterOptions{
		Addrs:                    o.Cluster,
		Password:                 o.Password,
		NewClient:                newClusterNode,
		MaxRedirects:             clusterRedirects,
		MaxRetries:               -1,
		DialerRetries:            1,
		DialTimeout:              o.Timeout,
		ReadTimeout:              o.Timeout,
		WriteTimeout:             o.Timeout,
		ContextTimeoutEnabled:    true,
		PoolSize:                 o.MaxInFlight, // per node
		PoolTimeout:              o.Deadline,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// String describes where the lanes live, for logs, with the password
// masked: "redis://:xxxxx@host:6379/0", or
// "redis-sentinel://:xxxxx@h1:26379,h2:26379/0?master=default", or
// "redis-cluster://:xxxxx@h1:7000,h2:7001".
func (o Options) String() string {
	const masked = "xxxxx"
	if len(o.Cluster) > 0 {
		var b strings.Builder
		b.WriteString("redis-cluster://")
		if o.Password != "" {
			b.WriteString(":" + masked + "@")
		}
		b.WriteString(strings.Join(o.Cluster, ","))
		return b.String()
	}
	if len(o.Sentinels) > 0 {
		var b strings.Builder
		b.WriteString("redis-sentinel://")
		if o.Password != "" {
			b.WriteString(":" + masked + "@")
		}
		b.WriteString(strings.Join(o.Sentinels, ","))
		b.WriteString("/" + strconv.Itoa(o.DB))
		master := o.MasterName
		if master == "" {
			master = DefaultMasterName
		}
		b.WriteString("?master=" + url.QueryEscape(master))
		return b.String()
	}
	if o.URL == "" {
		return "redis://(no address)"
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return "redis://(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), masked)
	} else if o.Password != "" {
		u.User = url.UserPassword(u.User.Username(), masked)
	}
	u.RawQuery = "" // query parameters may carry credentials too
	return u.String()
}

// formatSeconds formats d in seconds with at least one decimal, as the
// original did: 1s → "1.0", 100ms → "0.1", 50ms → "0.05".
func formatSeconds(d time.Duration) string {
	s := strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
