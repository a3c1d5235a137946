package redis

import "fmt"

// The store owns its key layout, whoever calls it: on a Redis Cluster a
// call's keys must share one hash slot, or every script fails with
// CROSSSLOT, the gate's skip window opens and the limiter is off. So the
// store gives the gate a hash-tagged prefix (KeyPrefix, which NewGate
// reads), refuses at Open or New a prefix it can't tag, and checks every
// operation's keys before sending it.

// onCluster reports whether the store's client is a Redis Cluster's.
func (s *Store) onCluster() bool {
	_, ok := s.client.(clusterScanner)
	return ok
}

// keyPrefix returns the prefix the lane keys must have under o, on a
// cluster or not: o.KeyPrefix (policy.DefaultKeyPrefix when empty), in
// the cluster key layout on a cluster (wrapped in a hash tag unless it has
// one).
func keyPrefix(o Options, cluster bool) (string, error) {
	layout := KeyLayoutDefault
	if cluster {
		layout = KeyLayoutCluster
	}
	return layout.Prefix(o.KeyPrefix)
}

// KeyPrefix is the prefix of the lane keys, Options.KeyPrefix, wrapped in
// a hash tag on a Redis Cluster unless it has one; the store declares it
// (Caps) and NewGate gives it to the gate. Without Options.KeyPrefix it is
// "" (the gate then uses its policy's key prefix), except on a cluster,
// whose keys must share one tag: there it is policy.DefaultKeyPrefix's.
func (s *Store) KeyPrefix() string {
	if s.opts.KeyPrefix == "" && !s.onCluster() {
		return ""
	}
	p, _ := keyPrefix(s.opts, s.onCluster()) // checked by Open and New
	return p
}

// checkSlot returns an error, before anything is sent, when the store is
// on a Redis Cluster and keys and prefixes (the waitlist's, whose keys the
// scripts make) do not all carry one hash tag: Redis would refuse the
// script with CROSSSLOT, or, for keys that happen to share a slot, the
// call's other lanes would not.
func (s *Store) checkSlot(op string, keys []string, prefixes ...string) error {
	if !s.onCluster() {
		return nil
	}
	tag, first := "", ""
	for _, list := range [][]string{keys, prefixes} {
		for _, k := range list {
			t := HashTag(k)
			if t == "" {
				return fmt.Errorf("%s: key %q has no hash tag: on a Redis Cluster every lane key must be under one hash-tagged prefix (redis.Options.KeyPrefix, given to the gate by NewGate; redis.KeyLayoutCluster)", op, k)
			}
			if first == "" {
				tag, first = t, k
			} else if t != tag {
				return fmt.Errorf("%s: keys %q and %q have different hash tags: on a Redis Cluster a call's keys must share one slot", op, first, k)
			}
		}
	}
	return nil
}
