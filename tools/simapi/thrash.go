package simapi

import (
	"context"
	"sync"
	"time"
)

// sharing is the API's capacity shared among the calls running, for a
// Knee with Thrash (processor sharing): each call has an amount of work,
// its usual time, that advances at rate(n) seconds per second while n
// calls run. The zero value is ready.
type sharing struct {
	mu   sync.Mutex
	jobs map[*job]struct{} // requires mu held
	last time.Time         // when the jobs' work was last advanced; requires mu held
}

// job is one call's work left, in seconds at full speed.
type job struct {
	left float64
	wake chan struct{} // told when the rate changes
}

// rate is the speed of each of n calls at once, in work-seconds per
// second: full up to the knee, Capacity / n past it, slowed again by the
// thrash.
func (k *Knee) rate(n int) float64 {
	c := float64(max(k.Capacity, 1))
	if float64(n) <= c {
		return 1
	}
	over := (float64(n) - c) / c
	return c / float64(n) / (1 + k.Thrash*over)
}

// advance moves every job's work on to now at the rate of the jobs
// running since the last advance. Requires s.mu held.
func (k *Knee) advance(now time.Time) {
	s := &k.share
	if !s.last.IsZero() {
		done := now.Sub(s.last).Seconds() * k.rate(len(s.jobs))
		for j := range s.jobs {
			j.left -= done
		}
	}
	s.last = now
}

// wakeAll tells every job the rate changed. Requires s.mu held.
func (k *Knee) wakeAll() {
	for j := range k.share.jobs {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// run plays d of work shared with the other calls running; it reports
// false when ctx ended first (the call left: its share goes to the rest).
func (k *Knee) run(ctx context.Context, d time.Duration) bool {
	s := &k.share
	j := &job{left: d.Seconds(), wake: make(chan struct{}, 1)}
	s.mu.Lock()
	k.advance(time.Now())
	if s.jobs == nil {
		s.jobs = map[*job]struct{}{}
	}
	s.jobs[j] = struct{}{}
	k.wakeAll()
	s.mu.Unlock()
	leave := func() {
		k.advance(time.Now())
		delete(s.jobs, j)
		k.wakeAll()
	}
	for {
		s.mu.Lock()
		k.advance(time.Now())
		if j.left <= 1e-6 {
			leave()
			s.mu.Unlock()
			return true
		}
		wait := time.Duration(j.left / k.rate(len(s.jobs)) * float64(time.Second))
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-j.wake:
		case <-ctx.Done():
			t.Stop()
			s.mu.Lock()
			leave()
			s.mu.Unlock()
			return false
		}
		t.Stop()
	}
}
