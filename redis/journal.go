package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The journal: a hash, token → the JSON list of the keys it holds leases
// in, where the decision service (decide.Journal) and the gateway
// (capgatehttp.Journal, in batches: JournalWrite) record their held calls
// so that their next incarnation can release what a killed one left. Its
// key is outside the lane prefix, so lane listings never see it.

var journalTakeScript = goredis.NewScript(`local all = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return all`)

// JournalKey returns the journal hash of name: outside the lane prefix
// (lane listings must never see it) yet distinct per prefix, so that
// deployments sharing a Redis under their own prefixes never take each
// other's journals.
func (s *Store) JournalKey(name string) string {
	p := s.KeyPrefix()
	if p != "" && !strings.HasSuffix(p, ":") {
		p += ":" // "ocl:capacity" + "gateway:…" must not read "ocl:capacitygateway:…"
	}
	return "capgate:journal:" + p + name
}

// JournalAdd records that token holds leases in keys under journal name,
// and keeps the journal at least ttl. It returns the errors of Store.
func (s *Store) JournalAdd(ctx context.Context, name, token string, keys []string, ttl time.Duration) error {
	const op = "journal a lease"
	b, err := json.Marshal(keys)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	key, v := s.JournalKey(name), string(b)
	_, err = run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.HSet(ctx, key, token, v)
			p.PExpire(ctx, key, ttl)
			return nil
		})
		return struct{}{}, err
	})
	return err
}

// JournalRemove forgets token in journal name. It returns the errors of
// Store.
func (s *Store) JournalRemove(ctx context.Context, name, token string) error {
	key := s.JournalKey(name)
	_, err := run(ctx, s, "forget a journalled lease", func(ctx context.Context) (struct{}, error) {
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.HDel(ctx, key, token)
			return nil
		})
		return struct{}{}, err
	})
	return err
}

// JournalWrite applies a batch to journal name in one round trip: it
// records that each token of add holds leases in its keys, forgets each
// token of remove, and, when it adds, keeps the journal at least ttl. A
// journal left empty is gone. The gateway writes its records this way, off
// its calls' path. It returns the errors of Store.
func (s *Store) JournalWrite(ctx context.Context, name string, add map[string][]string, remove []string, ttl time.Duration) error {
	const op = "write the journal"
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(add))
	for token, keys := range add {
		b, err := json.Marshal(keys)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		fields = append(fields, token, string(b))
	}
	key := s.JournalKey(name)
	_, err := run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if len(fields) > 0 {
				p.HSet(ctx, key, fields...)
				p.PExpire(ctx, key, ttl)
			}
			if len(remove) > 0 {
				p.HDel(ctx, key, remove...)
			}
			return nil
		})
		return struct{}{}, err
	})
	return err
}

// JournalRead returns every lease recorded in journal name (token → keys)
// and leaves them there. It returns the errors of Store.
func (s *Store) JournalRead(ctx context.Context, name string) (map[string][]string, error) {
	key := s.JournalKey(name)
	all, err := run(ctx, s, "read the journal", func(ctx context.Context) (map[string]string, error) {
		var cmd *goredis.MapStringStringCmd
		if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			cmd = p.HGetAll(ctx, key)
			return nil
		}); err != nil {
			return nil, err
		}
		return cmd.Val(), nil
	})
	if err != nil {
		return nil, err
	}
	return decodeJournal(all), nil
}

// JournalTake returns every lease recorded in journal name and empties it
// (one script: nothing added meanwhile is lost). It returns the errors of
// Store.
func (s *Store) JournalTake(ctx context.Context, name string) (map[string][]string, error) {
	const op = "take the journal"
	key := s.JournalKey(name)
	all, err := run(ctx, s, op, func(ctx context.Context) (map[string]string, error) {
		flat, err := journalTakeScript.Run(ctx, s.client, []string{key}).StringSlice()
		if err != nil {
			return nil, err
		}
		m := make(map[string]string, len(flat)/2)
		for i := 0; i+1 < len(flat); i += 2 {
			m[flat[i]] = flat[i+1]
		}
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	return decodeJournal(all), nil
}

// decodeJournal returns a journal's records (token → the JSON list of
// keys) as token → keys.
func decodeJournal(all map[string]string) map[string][]string {
	out := make(map[string][]string, len(all))
	for token, v := range all {
		var keys []string
		if err := json.Unmarshal([]byte(v), &keys); err != nil {
			continue // not ours to read; its leases expire by themselves
		}
		out[token] = keys
	}
	return out
}
