package redis

import (
	"os"
	"strings"
	"testing"

	"github.com/capgate/capgate/internal/skipnote"
	goredis "github.com/redis/go-redis/v9"
)

// EnvTestRedisURL names the variable that points the tests at a real Redis
// database, which TestMain flushes once.
const EnvTestRedisURL = "CAPGATE_TEST_REDIS_URL"

// RealRedisURL returns the real Redis to test against, or skips t.
func RealRedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvTestRedisURL)
	if u == "" {
		skipnote.Skip(t, "the real-Redis tests", "set "+EnvTestRedisURL+"=redis://127.0.0.1:6379/15 (a database the tests may flush)")
	}
	return u
}

// EnvTestRedisCluster names the variable that points the tests at a real
// Redis Cluster (comma-separated host:port seeds), which TestMain flushes
// once: scripts/cluster.sh starts one.
const EnvTestRedisCluster = "CAPGATE_TEST_REDIS_CLUSTER"

// RealRedisCluster returns the seeds of the Redis Cluster to test against,
// or skips t.
func RealRedisCluster(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvTestRedisCluster)
	if v == "" {
		skipnote.Skip(t, "the Redis Cluster tests", "set "+EnvTestRedisCluster+" (scripts/cluster.sh starts one on 127.0.0.1:7000-7005 and prints it)")
	}
	return strings.Split(v, ",")
}

// ClusterOptions returns the cluster client options Open would use for o.
func ClusterOptions(o Options) (*goredis.ClusterOptions, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return o.clusterOptions(), nil
}

// SetTestHookQueued has s call f each time an operation starts to wait
// for a slot. Set it before s is used.
func SetTestHookQueued(s *Store, f func()) { s.testHookQueued = f }

// SetTestHookFull has s call f each time an operation starts to wait for
// a place in the full queue. Set it before s is used.
func SetTestHookFull(s *Store, f func()) { s.testHookFull = f }

// ClientOptions and FailoverOptions return the client options Open would
// use for o.
func ClientOptions(o Options) (*goredis.Options, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return o.clientOptions()
}

func FailoverOptions(o Options) (*goredis.FailoverOptions, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return o.failoverOptions(), nil
}

// SeatsSrc is seats.lua, the prelude of the scripts that handle seats.
var SeatsSrc = seatsSrc

// Scripts are the embedded scripts by file name, each as Redis runs it
// (prelude included).
var Scripts = map[string]struct {
	Src    string
	Script *goredis.Script
}{
	"acquire.lua": {seatsSrc + acquireSrc, acquireScript},
	"renew.lua":   {seatsSrc + renewSrc, renewScript},
	"release.lua": {seatsSrc + releaseSrc, releaseScript},
	"count.lua":   {countSrc, countScript},
	"tune.lua":    {tuneSrc, tuneScript},

	"journalrenew.lua":  {journalRenewSrc, journalRenewScript},
	"journalread.lua":   {journalReadSrc, journalReadScript},
	"journalforget.lua": {journalForgetSrc, journalForgetScript},
	"journalleave.lua":  {journalLeaveSrc, journalLeaveScript},

	"repeatclaim.lua":  {repeatClaimSrc, repeatClaimScript},
	"repeattouch.lua":  {repeatTouchSrc, repeatTouchScript},
	"repeatfinish.lua": {repeatFinishSrc, repeatFinishScript},
	"repeatbytes.lua":  {repeatBytesSrc, repeatBytesScript},

	"waitjoin.lua":    {seatsSrc + waitPassSrc + waitJoinSrc, waitJoinScript},
	"waitpump.lua":    {seatsSrc + waitPassSrc + waitPumpSrc, waitPumpScript},
	"waitleave.lua":   {seatsSrc + waitPassSrc + waitLeaveSrc, waitLeaveScript},
	"waitrelease.lua": {seatsSrc + waitPassSrc + waitReleaseSrc, waitReleaseScript},
	"waiting.lua":     {seatsSrc + waitPassSrc + waitingSrc, waitingScript},
}

var FormatSeconds = formatSeconds

// AppendBorrow and ClassKeys are the ARGV tail and the extra KEYS of a
// call's Borrow.
var (
	AppendBorrow = appendBorrow
	ClassKeys    = classKeys
)

// Direct reports whether s runs commands on the caller's goroutine.
func Direct(s *Store) bool { return s.direct }

// RepeatKey returns the key of an idempotency entry.
func RepeatKey(s *Store, id string) string { return s.repeatKey(id) }
