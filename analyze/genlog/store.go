package genlog

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capgate/capgate"
)

var _ capgate.LaneStore = (*simStore)(nil)

// errOutage is what the store answers during a simulated outage.
var errOutage = errors.New("simulated lane store outage: connection refused")

// simStore is an in-process lane store on the simulated clock, following
// the LaneStore contract (SPEC §3). down makes every operation fail.
type simStore struct {
	now func() time.Time

	mu    sync.Mutex
	lanes map[string]map[string]time.Time // key → token → expiry; requires mu held
	down  bool                            // requires mu held
}

func newSimStore(now func() time.Time) *simStore {
	return &simStore{now: now, lanes: map[string]map[string]time.Time{}}
}

func (s *simStore) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// prune drops the expired leases of key; requires mu held.
func (s *simStore) prune(key string, now time.Time) map[string]time.Time {
	lane := s.lanes[key]
	for tok, exp := range lane {
		if !exp.After(now) {
			delete(lane, tok)
		}
	}
	if len(lane) == 0 {
		delete(s.lanes, key)
		return nil
	}
	return lane
}

func (s *simStore) Acquire(_ context.Context, req capgate.AcquireRequest, counts []int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return false, errOutage
	}
	now := s.now()
	if !req.NotAfter.IsZero() && now.After(req.NotAfter) {
		return false, capgate.ErrLateAcquire
	}
	full := false
	for i, k := range req.Keys {
		counts[i] = len(s.prune(k, now))
		full = full || counts[i] >= req.Limits[i]
	}
	if full && !req.Force {
		return false, nil
	}
	for _, k := range req.Keys {
		lane := s.lanes[k]
		if lane == nil {
			lane = map[string]time.Time{}
			s.lanes[k] = lane
		}
		lane[req.Token] = now.Add(req.Lease)
	}
	return true, nil
}

func (s *simStore) Renew(_ context.Context, token string, keys []string, lease time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, errOutage
	}
	now := s.now()
	held := 0
	for _, k := range keys {
		if exp, ok := s.lanes[k][token]; ok && exp.After(now) {
			held++
		}
	}
	if held == len(keys) {
		for _, k := range keys {
			s.lanes[k][token] = now.Add(lease)
		}
	}
	return held, nil
}

func (s *simStore) Release(_ context.Context, token string, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errOutage
	}
	for _, k := range keys {
		delete(s.lanes[k], token)
		if len(s.lanes[k]) == 0 {
			delete(s.lanes, k)
		}
	}
	return nil
}

func (s *simStore) Count(_ context.Context, keys []string, counts []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errOutage
	}
	now := s.now()
	for i, k := range keys {
		counts[i] = len(s.prune(k, now))
	}
	return nil
}

func (s *simStore) Keys(_ context.Context, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errOutage
	}
	var out []string
	for k := range s.lanes {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (s *simStore) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errOutage
	}
	return nil
}
