//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/tools/simapi"
)

// rig is the usual set-up: a counting upstream, a Redis master, a database
// in the shared PostgreSQL, and gateways gw1..gwN sharing them.
type rig struct {
	up    *upstream
	redis *redisServer
	rc    *goredis.Client
	pg    *pgCluster
	db    string
	gws   []*gateway
	sen   *sentinelSet // when the gateways find Redis through Sentinels
	// cluster is the Redis Cluster the gateways share (--redis-cluster);
	// then redis and rc are the master that serves the lanes' slot.
	cluster *redisCluster
}

// rigOptions shape a rig.
type rigOptions struct {
	Gateways int
	DB       string   // database name, one per scenario
	Config   []string // capgate capacity set assignments, applied before the gateways start
	Env      []string // gateway environment
	Users    []simapi.User
	Sentinel bool // a master, a replica and three Sentinels
	Cluster  bool // a Redis Cluster of 3 masters and 3 replicas
}

// staffToken is a staff user of simapi.DemoUsers.
const staffToken = "ada-token"

// loadUsers are the demo users the load picks from.
var loadUsers = []string{"ada", "grace", "linus", "barbara", "ken", "dennis", "margaret"}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if o.Users == nil {
		o.Users = simapi.DemoUsers()
	}
	r := &rig{up: newUpstream(o.Users)}
	switch {
	case o.Cluster:
		r.cluster = startCluster(t)
		m, _, err := r.cluster.owner(context.Background(), t, clusterLanePrefix)
		if err != nil {
			t.Fatal(err)
		}
		r.redis = m
	case o.Sentinel:
		r.sen = startSentinels(t)
		r.redis = r.sen.master
	default:
		r.redis = startRedis(t)
	}
	r.rc = r.redis.client(t)
	r.pg, r.db = sharedPG(t, o.DB)
	if len(o.Config) > 0 {
		setConfig(t, r.db, o.Config...)
	}
	for i := range o.Gateways {
		task := fmt.Sprintf("gw%d", i+1)
		g := gwOptions{Task: task, Upstream: r.up.listen(t, task), Redis: r.redis.url(), Database: r.db, Env: o.Env}
		if r.sen != nil {
			g.Redis, g.Sentinels, g.Master = "", r.sen.addrs(), r.sen.name
		}
		if r.cluster != nil {
			g.Redis, g.Args = "", append(g.Args, "--redis-cluster", r.cluster.seeds())
		}
		r.gws = append(r.gws, startGateway(t, g))
	}
	return r
}

// urls are the gateways' base URLs.
func (r *rig) urls(gws ...*gateway) []string {
	if len(gws) == 0 {
		gws = r.gws
	}
	var u []string
	for _, g := range gws {
		u = append(u, g.url())
	}
	return u
}

// status is GET /capacity/status/ as staff.
func status(base string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/capacity/status/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Token "+staffToken)
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String(), nil
}
