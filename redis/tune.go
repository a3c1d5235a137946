package redis

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/capgate/capgate/tune"
)

var (
	//go:embed tune.lua
	tuneSrc    string
	tuneScript = goredis.NewScript(tuneSrc)
)

var _ tune.Store = (*Store)(nil)

// TuneExchange implements tune.Store with one script (tune.lua) on
// the lane's tune hash, timed by Redis's clock. It returns the errors of
// Store.
func (s *Store) TuneExchange(ctx context.Context, key string, add tune.Window, every time.Duration) (tune.Round, error) {
	const op = "tune exchange"
	res, err := run(ctx, s, op, func(ctx context.Context) ([]any, error) {
		return tuneScript.Run(ctx, s.client, []string{key}, add.Calls, add.SumMicros, add.Full, add.MaxInFlight,
			add.SumInFlight, every.Milliseconds(), tune.StateTTL.Milliseconds()).Slice()
	})
	if err != nil {
		return tune.Round{}, err
	}
	if len(res) != 7 {
		return tune.Round{}, fmt.Errorf("%s: the script returned %d values; want 7", op, len(res))
	}
	var r tune.Round
	if st, ok := res[0].(string); ok {
		r.State = []byte(st)
	}
	num := func(v any) int64 { n, _ := v.(int64); return n }
	r.Due = num(res[1]) == 1
	r.Window = tune.Window{Calls: num(res[2]), SumMicros: num(res[3]), Full: num(res[4]),
		MaxInFlight: num(res[5]), SumInFlight: num(res[6])}
	return r, nil
}

// TuneSave implements tune.Store with HSET and PEXPIRE. It returns
// the errors of Store.
func (s *Store) TuneSave(ctx context.Context, key string, state []byte) error {
	const op = "tune save"
	st := string(state)
	_, err := run(ctx, s, op, func(ctx context.Context) (struct{}, error) {
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.HSet(ctx, key, "state", st)
			p.PExpire(ctx, key, tune.StateTTL)
			return nil
		})
		return struct{}{}, err
	})
	return err
}
