package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/repeat"
)

// The idempotency entries (repeat.Store). Each key's entry is
// one hash, <prefix>:idem:{<id>}, expiring: a running call's marker lives
// one lease unless its call touches it, a kept answer ttl_seconds. The id
// is its own hash tag, so on a Redis Cluster each entry lives in a slot of
// its own and every operation on it is one single-key script. The bounds
// of all kept answers and of each user's are counted apart, under one hash
// tag (<prefix>:idem:{bytes}:z, :n and :u, repeatbytes.lua), before an answer is
// written; an answer counted and then not written (its call lost the key)
// stays counted until it would have expired, so the count errs high.

var (
	//go:embed repeatclaim.lua
	repeatClaimSrc string
	//go:embed repeattouch.lua
	repeatTouchSrc string
	//go:embed repeatfinish.lua
	repeatFinishSrc string
	//go:embed repeatbytes.lua
	repeatBytesSrc string

	repeatClaimScript  = goredis.NewScript(repeatClaimSrc)
	repeatTouchScript  = goredis.NewScript(repeatTouchSrc)
	repeatFinishScript = goredis.NewScript(repeatFinishSrc)
	repeatBytesScript  = goredis.NewScript(repeatBytesSrc)
)

var _ repeat.Store = (*Store)(nil)

// repeatBase is the prefix of the idempotency keys: the lane key prefix
// without its braces, so that the entries' own hash tags are the ones
// Redis hashes.
func (s *Store) repeatBase() string {
	p := s.opts.KeyPrefix
	if p == "" {
		p = policy.DefaultKeyPrefix
	}
	return strings.NewReplacer("{", "", "}", "").Replace(p) + ":idem:"
}

// repeatKey returns the key of id's entry.
func (s *Store) repeatKey(id string) string { return s.repeatBase() + "{" + id + "}" }

// errBadRepeatID is the error for an id that can't be a hash tag.
var errBadRepeatID = errors.New("the idempotency id must be non-empty, without braces")

// errBadRepeatUser is the error for a user tag that is not lowercase hex.
var errBadRepeatUser = errors.New("the idempotency user tag must be lowercase hex")

func checkRepeatID(id string) error {
	if id == "" || strings.ContainsAny(id, "{}") {
		return errBadRepeatID
	}
	return nil
}

// ClaimRepeat implements repeat.Store with repeatclaim.lua.
// Once sent it is awaited to its answer, so a claim taken is reported. It
// returns the errors of Store.
func (s *Store) ClaimRepeat(ctx context.Context, id string, e repeat.Entry, ttl time.Duration, replaceFinished bool) (repeat.Entry, bool, error) {
	const op = "claim repeat"
	if err := checkRepeatID(id); err != nil {
		return repeat.Entry{}, false, fmt.Errorf("%s: %w", op, err)
	}
	if ttl < time.Millisecond {
		return repeat.Entry{}, false, fmt.Errorf("%s: %w", op, errBadLease)
	}
	replace := "0"
	if replaceFinished {
		replace = "1"
	}
	key := s.repeatKey(id)
	res, err := runToAnswer(ctx, s, op, func(ctx context.Context) ([]any, error) {
		return repeatClaimScript.Run(ctx, s.client, []string{key}, e.Token, e.CID, e.Fingerprint,
			ttl.Milliseconds(), replace).Slice()
	})
	if err != nil {
		return repeat.Entry{}, false, err
	}
	if len(res) == 1 {
		return repeat.Entry{}, true, nil
	}
	if len(res) != 5 {
		return repeat.Entry{}, false, fmt.Errorf("%s: the script returned %d values; want 1 or 5", op, len(res))
	}
	str := func(v any) string { t, _ := v.(string); return t }
	cur := repeat.Entry{Token: str(res[1]), CID: str(res[2]), Fingerprint: str(res[3])}
	if a, ok := res[4].(string); ok {
		cur.Answer = []byte(a)
	}
	return cur, false, nil
}

// GetRepeat implements repeat.Store with one HMGET. It
// returns the errors of Store.
func (s *Store) GetRepeat(ctx context.Context, id string) (repeat.Entry, bool, error) {
	const op = "get repeat"
	if err := checkRepeatID(id); err != nil {
		return repeat.Entry{}, false, fmt.Errorf("%s: %w", op, err)
	}
	key := s.repeatKey(id)
	res, err := run(ctx, s, op, func(ctx context.Context) ([]any, error) {
		// Through Pipelined: Client is kept narrow (a pipeline of one).
		var cmd *goredis.SliceCmd
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			cmd = p.HMGet(ctx, key, "s", "t", "c", "f", "a")
			return nil
		})
		if err != nil {
			return nil, err
		}
		return cmd.Result()
	})
	if err != nil {
		return repeat.Entry{}, false, err
	}
	if len(res) != 5 {
		return repeat.Entry{}, false, fmt.Errorf("%s: HMGET returned %d values; want 5", op, len(res))
	}
	state, _ := res[0].(string)
	if state == "" {
		return repeat.Entry{}, false, nil
	}
	str := func(v any) string { t, _ := v.(string); return t }
	e := repeat.Entry{Token: str(res[1]), CID: str(res[2]), Fingerprint: str(res[3])}
	if state == "d" {
		e.Answer = []byte(str(res[4]))
	}
	return e, true, nil
}

// TouchRepeat implements repeat.Store with repeattouch.lua.
// It returns the errors of Store.
func (s *Store) TouchRepeat(ctx context.Context, id, token string, ttl time.Duration) (bool, error) {
	const op = "touch repeat"
	if err := checkRepeatID(id); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	if ttl < time.Millisecond {
		return false, fmt.Errorf("%s: %w", op, errBadLease)
	}
	key := s.repeatKey(id)
	n, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
		return repeatTouchScript.Run(ctx, s.client, []string{key}, token, ttl.Milliseconds()).Int64()
	})
	return n == 1, err
}

// FinishRepeat implements repeat.Store: repeatbytes.lua
// counts the answer within maxTotal, then repeatfinish.lua writes it (or,
// with no answer or no room, deletes the entry). It returns the errors of
// Store.
func (s *Store) FinishRepeat(ctx context.Context, id, token string, answer []byte, keep time.Duration, b repeat.Bound) (bool, error) {
	const op = "finish repeat"
	if err := checkRepeatID(id); err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	if strings.Trim(b.User, "0123456789abcdef") != "" {
		return false, fmt.Errorf("%s: %w", op, errBadRepeatUser)
	}
	if keep < time.Millisecond {
		return false, fmt.Errorf("%s: %w", op, errBadLease)
	}
	key := s.repeatKey(id)
	keepIt := answer != nil
	if keepIt {
		budget := []string{s.repeatBase() + "{bytes}:z", s.repeatBase() + "{bytes}:n", s.repeatBase() + "{bytes}:u"}
		n, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
			return repeatBytesScript.Run(ctx, s.client, budget, len(answer), keep.Milliseconds(), b.Total, token,
				b.User, b.PerUser).Int64()
		})
		if err != nil {
			return false, err
		}
		keepIt = n == 1
	}
	flag, body := "0", ""
	if keepIt {
		flag, body = "1", string(answer)
	}
	n, err := run(ctx, s, op, func(ctx context.Context) (int64, error) {
		return repeatFinishScript.Run(ctx, s.client, []string{key}, token, flag, body, keep.Milliseconds()).Int64()
	})
	return n == 1, err
}
