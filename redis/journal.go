package redis

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The journal (journal.Store): a group's roster, a sorted set of its
// incarnations scored by the ms (Redis's clock) at which each one's
// liveness lapses, and each incarnation's journal, a hash of token → the
// JSON list of the keys it holds leases in. The keys are outside the lane
// prefix, so lane listings never see them, yet carry it, so deployments
// sharing a Redis under their own prefixes never read each other's, and
// on a Redis Cluster (a hash-tagged prefix) a group's keys share the
// lanes' slot: the scripts that read a roster and a journal together are
// one slot's.
//
//	capgate:journal:<prefix>:<group>:live   the roster
//	capgate:journal:<prefix>:<group>:<id>   an incarnation's journal

var (
	//go:embed journalrenew.lua
	journalRenewSrc string
	//go:embed journalread.lua
	journalReadSrc string
	//go:embed journalforget.lua
	journalForgetSrc string
	//go:embed journalleave.lua
	journalLeaveSrc string

	journalRenewScript  = goredis.NewScript(journalRenewSrc)
	journalReadScript   = goredis.NewScript(journalReadSrc)
	journalForgetScript = goredis.NewScript(journalForgetSrc)
	journalLeaveScript  = goredis.NewScript(journalLeaveSrc)
)

// journalBase returns the start of group's keys.
func (s *Store) journalBase(group string) string {
	p := s.KeyPrefix()
	if p != "" && !strings.HasSuffix(p, ":") {
		p += ":" // "ocl:capacity" + "gateway:…" must not read "ocl:capacitygateway:…"
	}
	return "capgate:journal:" + p + group
}

// JournalRoster returns the key of group's roster.
func (s *Store) JournalRoster(group string) string { return s.journalBase(group) + ":live" }

// JournalKey returns the key of incarnation id's journal in group.
func (s *Store) JournalKey(group, id string) string { return s.journalBase(group) + ":" + id }

// JournalRenew implements journal.Store. It returns the errors of Store.
func (s *Store) JournalRenew(ctx context.Context, group, self string, ttl, keep time.Duration) (map[string]time.Duration, error) {
	const op = "renew the journal's liveness"
	keys := []string{s.JournalRoster(group)}
	if err := s.checkSlot(op, keys); err != nil {
		return nil, err
	}
	flat, err := run(ctx, s, op, func(ctx context.Context) ([]string, error) {
		return journalRenewScript.Run(ctx, s.client, keys, self, max(ttl.Milliseconds(), 1), max(keep.Milliseconds(), 1)).StringSlice()
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Duration, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		ms, err := strconv.ParseInt(flat[i+1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: liveness %q of %q: %w", op, flat[i+1], flat[i], err)
		}
		out[flat[i]] = time.Duration(ms) * time.Millisecond
	}
	return out, nil
}

// JournalWrite implements journal.Store: HSET, HDEL, and PEXPIRE when it
// adds, in one pipeline. It returns the errors of Store.
func (s *Store) JournalWrite(ctx context.Context, group, self string, add map[string][]string, remove []string, ttl time.Duration) error {
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
	key := s.JournalKey(group, self)
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

// JournalRead implements journal.Store. It returns the errors of Store.
func (s *Store) JournalRead(ctx context.Context, group, id string) (map[string][]string, bool, error) {
	const op = "read a journal"
	keys := []string{s.JournalRoster(group), s.JournalKey(group, id)}
	if err := s.checkSlot(op, keys); err != nil {
		return nil, false, err
	}
	res, err := run(ctx, s, op, func(ctx context.Context) ([]any, error) {
		return journalReadScript.Run(ctx, s.client, keys, id).Slice()
	})
	if err != nil {
		return nil, false, err
	}
	if len(res) == 0 || res[0] != int64(1) {
		return nil, false, nil
	}
	all := make(map[string]string, (len(res)-1)/2)
	for i := 1; i+1 < len(res); i += 2 {
		token, _ := res[i].(string)
		v, _ := res[i+1].(string)
		all[token] = v
	}
	return decodeJournal(all), true, nil
}

// JournalForget implements journal.Store. It returns the errors of
// Store.
func (s *Store) JournalForget(ctx context.Context, group, id string, tokens []string) error {
	const op = "forget journalled leases"
	keys := []string{s.JournalRoster(group), s.JournalKey(group, id)}
	if err := s.checkSlot(op, keys); err != nil {
		return err
	}
	args := make([]any, 0, 1+len(tokens))
	args = append(args, id)
	for _, t := range tokens {
		args = append(args, t)
	}
	_, err := run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, journalForgetScript.Run(ctx, s.client, keys, args...).Err()
	})
	return err
}

// JournalLeave implements journal.Store. It returns the errors of Store.
func (s *Store) JournalLeave(ctx context.Context, group, self string) error {
	const op = "leave the journal's roster"
	keys := []string{s.JournalRoster(group), s.JournalKey(group, self)}
	if err := s.checkSlot(op, keys); err != nil {
		return err
	}
	_, err := run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, journalLeaveScript.Run(ctx, s.client, keys, self).Err()
	})
	return err
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
