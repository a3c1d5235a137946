package redis

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const (
	// clusterRedirects is how many MOVED or ASK redirects (or TRYAGAIN and
	// CLUSTERDOWN answers) one command follows, all within the operation
	// deadline: a slot that moves and is then asked for again during a
	// resharding.
	clusterRedirects = 3
	// clusterRefresh is how often a cluster store reloads the cluster's
	// layout (CLUSTER SLOTS) from its last failed command until one
	// succeeds. Without it, a gateway whose calls skip Redis after a
	// failure would try the dead master again when the skip window ends:
	// go-redis reloads on MOVED, not on a node that stopped answering, and
	// a reload right after the failure still finds the dead master, until
	// the cluster promotes its replica.
	clusterRefresh = time.Second
)

// clusterScanner is what Keys needs of a Redis Cluster client beyond
// Client: a client per master, since SCAN walks one node.
type clusterScanner interface {
	MasterForKey(ctx context.Context, key string) (*goredis.Client, error)
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *goredis.Client) error) error
}

var _ clusterScanner = (*goredis.ClusterClient)(nil)

// newClusterNode makes the client of one cluster node. Its hook makes
// every error that is not Redis's own answer (a dial, read or write error,
// a timeout) final, so the cluster client never resends the command: an
// acquire whose answer was lost may have run, and running it again would
// count the call's own lease against it. Redis's answers (MOVED, ASK,
// TRYAGAIN, CLUSTERDOWN, READONLY) pass unchanged: the cluster client
// follows them, and the command had not run.
func newClusterNode(o *goredis.Options) *goredis.Client {
	c := goredis.NewClient(o)
	c.AddHook(finalErrors{})
	return c
}

type finalErrors struct{}

func (finalErrors) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessPipelineHook leaves pipelines alone: the store's only pipeline
// is Release's ZREMs, which may run twice.
func (finalErrors) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (finalErrors) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		return final(next(ctx, cmd))
	}
}

// final returns err as a plain error that go-redis won't resend, unless
// it is Redis's answer or the node client was closed before sending.
func final(err error) error {
	var reply goredis.Error
	if err == nil || errors.As(err, &reply) || errors.Is(err, goredis.ErrClosed) {
		return err
	}
	return &sentError{msg: err.Error()}
}

// sentError is a network error of a command that may have been sent. It
// has no Unwrap and no Timeout method, so go-redis treats it as final.
type sentError struct{ msg string }

func (e *sentError) Error() string { return e.msg }

// watchHook marks the store's view of the cluster stale when a command
// fails other than by Redis's answer, and fresh again when one succeeds.
type watchHook struct{ stale *atomic.Bool }

func (h watchHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h watchHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		h.note(err)
		return err
	}
}

func (h watchHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		h.note(err)
		return err
	}
}

func (h watchHook) note(err error) {
	var reply goredis.Error
	switch {
	case err == nil:
		h.stale.Store(false)
	case !errors.As(err, &reply):
		h.stale.Store(true)
	}
}

// clusterRefresher owns the goroutine that reloads the cluster's layout
// every clusterRefresh while the client's last command failed, and closes
// the client after stopping it.
type clusterRefresher struct {
	client *goredis.ClusterClient
	stale  atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// newClusterClient makes the store's cluster client and starts its
// refresher.
func newClusterClient(o Options) (*goredis.ClusterClient, io.Closer) {
	c := goredis.NewClusterClient(o.clusterOptions())
	r := &clusterRefresher{client: c, stop: make(chan struct{}), done: make(chan struct{})}
	c.AddHook(watchHook{stale: &r.stale})
	go r.run()
	return c, r
}

func (r *clusterRefresher) run() {
	defer close(r.done)
	t := time.NewTicker(clusterRefresh)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			// ReloadState only schedules a reload on go-redis's own
			// goroutine; this one never blocks on Redis.
			if r.stale.Load() {
				r.client.ReloadState(context.Background())
			}
		}
	}
}

// Close stops the refresher and closes the client.
func (r *clusterRefresher) Close() error {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	return r.client.Close()
}

// scanCluster lists the keys under prefix on a Redis Cluster. A prefix
// with a hash tag (the cluster key layout's) pins every key under it to one
// slot, so only the master that owns the slot is scanned: the other
// masters hold none of them, and a status read must not depend on them
// (nor walk their keyspaces). Any other prefix is scanned on every master.
// While the slot itself is being migrated, keys already moved to the new
// owner are missed until it completes; only the status undercounts then,
// acquires follow ASK.
func scanCluster(ctx context.Context, c clusterScanner, prefix, match string) (map[string]struct{}, error) {
	seen := make(map[string]struct{})
	if HashTag(prefix) != "" {
		node, err := c.MasterForKey(ctx, prefix)
		if err != nil {
			return nil, err
		}
		return seen, scanNode(ctx, node, prefix, match, seen)
	}
	var mu sync.Mutex
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
		part := make(map[string]struct{})
		if err := scanNode(ctx, node, prefix, match, part); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for key := range part {
			seen[key] = struct{}{}
		}
		return nil
	})
	return seen, err
}
