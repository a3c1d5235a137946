package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// ConfigError is a Redis that answered, but refused what the options ask
// of it in a way no retry heals: a DB index out of range, a password
// refused or missing, a cluster mode that does not match. A gateway
// should not start on it, unlike on a Redis that is merely down.
type ConfigError struct {
	Err error
}

func (e *ConfigError) Error() string { return "Redis refuses these settings: " + e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }

// transientReplies start Redis error replies that pass: a Redis loading
// its data, a failover or a cluster healing.
var transientReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MOVED", "ASK"}

// CheckConfig asks Redis, once, whether these options can ever work: it
// returns a *ConfigError when Redis answers with an error reply no retry
// heals (to the connection's AUTH and SELECT, or to the cluster's layout
// query), or when a standalone URL points at a node of a Redis Cluster. A
// Redis that does not answer (down, unreachable, slow) is no ConfigError:
// CheckConfig returns nil then, and the store fails open as always.
func (s *Store) CheckConfig(ctx context.Context) error {
	err := s.Ping(ctx)
	if cerr := configError(err); cerr != nil {
		return cerr
	}
	if err != nil {
		return nil
	}
	if c, ok := s.client.(*goredis.Client); ok && len(s.opts.Sentinels) == 0 {
		info, err := run(ctx, s, "info cluster", func(ctx context.Context) (string, error) {
			return c.Info(ctx, "cluster").Result()
		})
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			return &ConfigError{Err: errors.New("it is a node of a Redis Cluster: use --redis-cluster")}
		}
	}
	return nil
}

// configError returns err as a *ConfigError when it is a Redis error
// reply that does not pass.
func configError(err error) error {
	var reply goredis.Error
	if errors.Is(err, goredis.Nil) {
		return nil // no answer to a lookup (a Sentinel without the master yet): not a refusal
	}
	if err == nil || !errors.As(err, &reply) {
		if err != nil && strings.Contains(err.Error(), "cluster support disabled") {
			return &ConfigError{Err: fmt.Errorf("%w (not a Redis Cluster: use --redis)", err)}
		}
		return nil
	}
	msg := reply.Error()
	for _, p := range transientReplies {
		if strings.HasPrefix(msg, p) {
			return nil
		}
	}
	if strings.Contains(msg, "cluster support disabled") {
		return &ConfigError{Err: fmt.Errorf("%s (not a Redis Cluster: use --redis)", msg)}
	}
	return &ConfigError{Err: errors.New(msg)}
}
