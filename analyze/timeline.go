package analyze

import "github.com/capgate/capgate/policy"

// The timeline's shape: buckets start 1 s wide and double (merging pairs)
// whenever there would be more than maxBuckets, so its memory is fixed;
// a lane counted per task or per field value is charted for its first
// maxTaskSeries ids.
const (
	firstBucketMS = 1000
	maxBuckets    = 1000
	maxTaskSeries = 8
)

// tlSeries is one lane on the in-flight chart.
type tlSeries struct {
	name      string
	cur       int // calls in flight now
	inFlight  []int
	limit     []int // -1: none recorded in the bucket
	lastLimit int   // the last limit recorded before the current bucket
}

// timeline buckets the reconstructed calls in flight per lane, and the
// refusals, over time. Times must be given in non-decreasing order.
type timeline struct {
	lay     *layout
	started bool
	origin  int64
	width   int64
	n       int
	series  []*tlSeries
	index   map[laneKey]int
	ids     [policy.MaxLanes]int // series per lane charted per task or field value
	shadow  []int64
	refused []int64
	whatIf  []int64
}

func newTimeline(lay *layout) *timeline {
	return &timeline{lay: lay, width: firstBucketMS, index: map[laneKey]int{}}
}

// seriesOf returns the series of lane k, creating it; nil for lanes not
// charted (those counted per user; tasks and field values past
// maxTaskSeries).
func (t *timeline) seriesOf(k laneKey) *tlSeries {
	l := t.lay.lanes[k.lane]
	if l.ByUser() {
		return nil
	}
	if i, ok := t.index[k]; ok {
		if i < 0 {
			return nil
		}
		return t.series[i]
	}
	name := l.Name
	switch {
	case l.Scope == policy.ScopeTask || l.ByField():
		if t.ids[k.lane] >= maxTaskSeries {
			t.index[k] = -1
			return nil
		}
		t.ids[k.lane]++
		name += ":" + k.id
	case l.ByTier():
		name += ":" + k.id
	}
	s := &tlSeries{name: name, inFlight: make([]int, t.n), limit: make([]int, t.n), lastLimit: -1}
	for i := range s.limit {
		s.limit[i] = -1
	}
	t.index[k] = len(t.series)
	t.series = append(t.series, s)
	return s
}

// advance makes the bucket holding ms the current one.
func (t *timeline) advance(ms int64) {
	if !t.started {
		t.started, t.origin = true, ms-ms%t.width
	}
	idx := int((ms - t.origin) / t.width)
	for idx >= maxBuckets {
		t.compact()
		idx = int((ms - t.origin) / t.width)
	}
	for t.n <= idx {
		if t.n > 0 {
			for _, s := range t.series {
				if s.limit[t.n-1] < 0 {
					s.limit[t.n-1] = s.lastLimit
				}
				s.lastLimit = s.limit[t.n-1]
			}
		}
		for _, s := range t.series {
			s.inFlight = append(s.inFlight, s.cur)
			s.limit = append(s.limit, -1)
		}
		t.shadow = append(t.shadow, 0)
		t.refused = append(t.refused, 0)
		t.whatIf = append(t.whatIf, 0)
		t.n++
	}
}

// compact halves the buckets: pairs merge, keeping the larger in-flight
// count and limit and the sum of refusals.
func (t *timeline) compact() {
	half := (t.n + 1) / 2
	for _, s := range t.series {
		for i := range half {
			j := 2 * i
			in, lim := s.inFlight[j], s.limit[j]
			if j+1 < t.n {
				in, lim = max(in, s.inFlight[j+1]), max(lim, s.limit[j+1])
			}
			s.inFlight[i], s.limit[i] = in, lim
		}
		s.inFlight, s.limit = s.inFlight[:half], s.limit[:half]
	}
	for _, v := range []*[]int64{&t.shadow, &t.refused, &t.whatIf} {
		for i := range half {
			sum := (*v)[2*i]
			if 2*i+1 < t.n {
				sum += (*v)[2*i+1]
			}
			(*v)[i] = sum
		}
		*v = (*v)[:half]
	}
	t.n = half
	t.width *= 2
}

// set records lane k's calls in flight after a change at the current
// bucket, with the limit its line recorded (limit < 0: none).
func (t *timeline) set(k laneKey, count, limit int) {
	s := t.seriesOf(k)
	if s == nil || t.n == 0 {
		return
	}
	s.cur = count
	s.inFlight[t.n-1] = max(s.inFlight[t.n-1], count)
	if limit >= 0 {
		s.limit[t.n-1] = max(s.limit[t.n-1], limit)
	}
}

// report returns the timeline; whatIf says whether to include the what-if
// refusals.
func (t *timeline) report(whatIf bool) Timeline {
	out := Timeline{BucketMS: t.width, ShadowRefused: t.shadow, Refused: t.refused}
	if !t.started {
		return out
	}
	out.Start = msTime(t.origin)
	if whatIf {
		out.WhatIfRefused = t.whatIf
	}
	for _, s := range t.series {
		lim := append([]int(nil), s.limit...)
		if n := len(lim); n > 0 && lim[n-1] < 0 {
			lim[n-1] = s.lastLimit
		}
		out.Series = append(out.Series, Series{Name: s.name, InFlight: s.inFlight, Limit: lim})
	}
	return out
}
