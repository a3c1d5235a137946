package status

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Windows are the spans Decisions counts over, in minutes: the last 1, 5
// and 15, as a load average.
var Windows = []int{1, 5, 15}

// Decisions is how many calls this gateway decided over each of Windows
// (Counts[i] is over Windows[i] minutes), by tier and by lane.
//
// ByTier is tier → decision → counts. ByLane is lane name → decision →
// counts, where a refused or shadow-refused call counts in the lane that
// was full (its scope) and an admitted one in every lane it took. Only
// decisions seen are present.
type Decisions struct {
	Windows []int                       `json:"window_minutes"`
	ByTier  map[string]map[string][]int `json:"by_tier"`
	ByLane  map[string]map[string][]int `json:"by_lane"`
}

// Recent counts decisions in 10 s buckets for the last 15 minutes (so
// "the last minute" is the last 60 to 70 s). Safe for
// concurrent use; the zero value is not: use NewRecent.
type Recent struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[int64]map[recentKey]int // bucket (Unix / bucketSeconds) → counts; requires mu held
}

// bucketSeconds is the span of one bucket.
const bucketSeconds = 10

// perMinute is the buckets in a minute.
const perMinute = 60 / bucketSeconds

type recentKey struct {
	lane     bool   // a lane's count, else a tier's
	name     string // the lane or the tier
	decision string
}

// NewRecent returns an empty count; now is its clock (nil: time.Now).
func NewRecent(now func() time.Time) *Recent {
	if now == nil {
		now = time.Now
	}
	return &Recent{now: now, buckets: map[int64]map[recentKey]int{}}
}

// Record counts one decided call: its tier, its decision, the lanes it
// took (for an admitted call) and the lane that was full (scope, for a
// refused or shadow-refused one; "" otherwise).
func (r *Recent) Record(tier, decision string, lanes []string, scope string) {
	bucket := r.now().Unix() / bucketSeconds
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[bucket]
	if b == nil {
		b = map[recentKey]int{}
		r.buckets[bucket] = b
		for m := range r.buckets { // forget what no window reaches
			if m <= bucket-int64(slices.Max(Windows)*perMinute) {
				delete(r.buckets, m)
			}
		}
	}
	b[recentKey{false, tier, decision}]++
	if scope != "" {
		b[recentKey{true, scope, decision}]++
		return
	}
	for _, l := range lanes {
		b[recentKey{true, l, decision}]++
	}
}

// Decisions returns the counts over each of Windows, the current bucket
// included.
func (r *Recent) Decisions() *Decisions {
	bucket := r.now().Unix() / bucketSeconds
	d := &Decisions{Windows: slices.Clone(Windows), ByTier: map[string]map[string][]int{}, ByLane: map[string]map[string][]int{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range slices.Sorted(maps.Keys(r.buckets)) {
		for k, n := range r.buckets[m] {
			into := d.ByTier
			if k.lane {
				into = d.ByLane
			}
			if into[k.name] == nil {
				into[k.name] = map[string][]int{}
			}
			counts := into[k.name][k.decision]
			if counts == nil {
				counts = make([]int, len(Windows))
				into[k.name][k.decision] = counts
			}
			for i, w := range Windows {
				if m > bucket-int64(w*perMinute) {
					counts[i] += n
				}
			}
		}
	}
	return d
}
