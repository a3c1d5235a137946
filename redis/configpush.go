package redis

import (
	"context"
	"fmt"
	"strconv"
)

// ConfigChannel announces config changes on a Redis pub/sub channel, for
// gateways whose lanes are in Redis: the process that saves a change
// publishes its version, and every gateway subscribed re-reads the config
// at once. On a Redis Cluster a message published on any node reaches the
// subscribers of every node. It is a config.Notifier and a
// config.Subscriber (the store adapter need not import the config
// service to be one: configpush_test.go checks it).
type ConfigChannel struct {
	store *Store
	name  string
}

// NewConfigChannel returns the config channel of the lanes under
// keyPrefix: "<keyPrefix>:config", so gateways sharing a Redis but not
// lanes don't hear each other.
func NewConfigChannel(s *Store, keyPrefix string) *ConfigChannel {
	return &ConfigChannel{store: s, name: keyPrefix + ":config"}
}

// ConfigChannel names the channel for logs.
func (c *ConfigChannel) ConfigChannel() string {
	return "Redis pub/sub " + c.name + " on " + c.store.String()
}

// NotifyConfig publishes version, bounded by the store's deadline.
func (c *ConfigChannel) NotifyConfig(ctx context.Context, version int64) error {
	_, err := c.Publish(ctx, version)
	return err
}

// Publish publishes version, bounded by the store's deadline, and returns
// how many subscribers (gateways) received it. On a Redis Cluster that
// counts only the node's own subscribers.
func (c *ConfigChannel) Publish(ctx context.Context, version int64) (int64, error) {
	return run(ctx, c.store, "publish config", func(ctx context.Context) (int64, error) {
		return c.store.client.Publish(ctx, c.name, strconv.FormatInt(version, 10)).Result()
	})
}

// SubscribeConfig subscribes to the channel and calls changed for each
// version published, until ctx is done or the connection fails.
func (c *ConfigChannel) SubscribeConfig(ctx context.Context, ready func(), changed func(version int64)) error {
	ps := c.store.client.Subscribe(ctx, c.name)
	defer ps.Close()
	// A blocking receive does not end with ctx: closing the subscription
	// does.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	if _, err := ps.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("subscribe %s: %w", c.name, err)
	}
	if ready != nil {
		ready()
	}
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receive on %s: %w", c.name, err)
		}
		v, _ := strconv.ParseInt(msg.Payload, 10, 64)
		changed(v)
	}
}
