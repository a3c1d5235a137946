//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// clusterLanePrefix is the prefix of every lane key in the cluster key
// layout, which --redis-cluster implies: the default prefix as a hash tag.
const clusterLanePrefix = "{ocl:capacity}:"

// redisCluster is a Redis Cluster of 3 masters and 3 replicas the suite
// started, each node on two spare ports (clients, cluster bus).
type redisCluster struct {
	nodes []*redisServer
}

// clusterNodeTimeout is how long a master may be silent before the
// cluster fails it over: short, for a quick scenario, yet long enough that
// a loaded 2-core machine does not fail a master over by accident.
const clusterNodeTimeout = 2 * time.Second

// startCluster starts six cluster-enabled redis-servers without
// persistence, makes them a cluster with redis-cli --cluster create, and
// waits until every node sees the three masters and three replicas.
func startCluster(t testing.TB) *redisCluster {
	t.Helper()
	c := &redisCluster{}
	var addrs []string
	for range 6 {
		r := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", itoa(int(clusterNodeTimeout.Milliseconds())),
			"--cluster-port", itoa(freePort(t)))
		c.nodes = append(c.nodes, r)
		addrs = append(addrs, r.addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := run(ctx, "redis-cli", append(args, "--cluster-replicas", "1", "--cluster-yes")...); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if _, err := waitFor(ctx, 45*time.Second, 100*time.Millisecond, func() error {
		for _, n := range c.nodes {
			if err := clusterHealthy(ctx, n.client(t)); err != nil {
				return fmt.Errorf("%s: %w", n.addr(), err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	return c
}

// clusterHealthy checks that a node sees a whole cluster: state ok, six
// nodes, three of them replicas.
func clusterHealthy(ctx context.Context, c *goredis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
		return errors.New("cluster not formed yet")
	}
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	if n := strings.Count(nodes, "slave "); n != 3 {
		return fmt.Errorf("%d replicas known, want 3", n)
	}
	return nil
}

// seeds is the --redis-cluster value: every node.
func (c *redisCluster) seeds() string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.addr())
	}
	return strings.Join(a, ",")
}

// node returns the node on addr.
func (c *redisCluster) node(addr string) *redisServer {
	for _, n := range c.nodes {
		if n.addr() == addr {
			return n
		}
	}
	return nil
}

// owner asks the first live node which master serves key's slot and
// which replicas it has.
func (c *redisCluster) owner(ctx context.Context, t testing.TB, key string) (master *redisServer, replicas []*redisServer, err error) {
	var last error
	for _, n := range c.nodes {
		if n.exited() {
			continue
		}
		cl := n.client(t)
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			last = err
			continue
		}
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			last = err
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				master = c.node(s.Nodes[0].Addr)
				for _, r := range s.Nodes[1:] {
					if rn := c.node(r.Addr); rn != nil {
						replicas = append(replicas, rn)
					}
				}
				if master == nil {
					return nil, nil, fmt.Errorf("slot %d: master %s is not one of ours", slot, s.Nodes[0].Addr)
				}
				return master, replicas, nil
			}
		}
		return nil, nil, fmt.Errorf("slot %d is not served", slot)
	}
	return nil, nil, fmt.Errorf("no cluster node answered: %w", last)
}

// replicaCaughtUp waits until every replica of master has acknowledged the
// master's replication offset, so a failover loses none of its writes.
func replicaCaughtUp(ctx context.Context, master *goredis.Client) error {
	_, err := waitFor(ctx, 10*time.Second, 20*time.Millisecond, func() error {
		info, err := master.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		var offset string
		var lag []string
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
				offset = v
			}
			if strings.HasPrefix(l, "slave") && strings.Contains(l, "offset=") {
				lag = append(lag, l)
			}
		}
		if len(lag) == 0 {
			return errors.New("no replica connected")
		}
		for _, l := range lag {
			if !strings.Contains(l, "offset="+offset+",") {
				return fmt.Errorf("replica behind master offset %s: %s", offset, l)
			}
		}
		return nil
	})
	return err
}
