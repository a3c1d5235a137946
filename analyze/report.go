package analyze

import (
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Report is what Analyze found in the logs. Its JSON form is the output of
// `capgate analyze --json`; maps encode with sorted keys, so the output is
// stable for a given input. Its keys are the same for every policy; the
// names in it (event, routes, lanes, tiers) are the policy's.
type Report struct {
	// Policy is the policy the log was read under; WriteText and
	// WriteHTML name things as it does. nil is the built-in OCL policy.
	// It is not part of the JSON.
	Policy *policy.Policy `json:"-"`

	Inputs []InputSummary `json:"inputs"`
	Lines  LineCounts     `json:"lines"`
	// Dropped is the sum of log_dropped over every JSON line read: the
	// lines the gateways' sinks dropped, which this report can't see.
	Dropped int64 `json:"log_dropped"`
	// From and To span the calls: the earliest start, the latest ts.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`

	Calls    CallCounts  `json:"calls"`
	Lanes    []LanePeak  `json:"lanes"`
	Users    UserPeaks   `json:"users"`
	Refusals Refusals    `json:"refusals"`
	Held     Percentiles `json:"held_ms"`
	Queue    Percentiles `json:"queue_ms"`
	Wait     Percentiles `json:"wait_ms"` // calls that waited for a slot

	Unavailable    Unavailability `json:"unavailable"`
	Reconstruction Reconstruction `json:"reconstruction"`
	WhatIf         *WhatIf        `json:"what_if,omitempty"`
	Timeline       Timeline       `json:"timeline"`
}

// InputSummary counts the lines of one input.
type InputSummary struct {
	Name   string `json:"name"`
	Lines  int64  `json:"lines"`
	Events int64  `json:"events"` // lines of the policy's event
}

// LineCounts says what the lines were. Skipped = NotJSON + Invalid +
// TooLong + the sum of OtherEvents; blank lines are not counted as skipped.
type LineCounts struct {
	Read    int64 `json:"read"`
	Events  int64 `json:"events"`
	Skipped int64 `json:"skipped"`
	Blank   int64 `json:"blank"`
	NotJSON int64 `json:"not_json"`
	// Invalid counts lines of the policy's event without a known
	// decision or a ts.
	Invalid int64 `json:"invalid"`
	TooLong int64 `json:"too_long"`
	// OtherEvents counts JSON lines by their "event" ("(no event)" when
	// they have none, "(other)" past the first 50 names; a repeat's line,
	// which holds no lane, as "<event> joined" or "<event> replayed").
	OtherEvents map[string]int64 `json:"other_events"`
}

// CallCounts counts the calls by decision, and by decision within each
// route, tier and mode.
type CallCounts struct {
	Total      int64            `json:"total"`
	ByDecision map[string]int64 `json:"by_decision"`
	// ByEndpoint is by route: the route's log name, under the policy's
	// route key (the built-in policy's "endpoint"). Its JSON key is
	// "by_endpoint" for every policy.
	ByEndpoint map[string]map[string]int64 `json:"by_endpoint"`
	ByTier     map[string]map[string]int64 `json:"by_tier"`
	ByMode     map[string]int64            `json:"by_mode"`
}

// LanePeak is the busiest a lane got. Peak comes from the counts the lines
// recorded (under the lane's log keys, OCL's in_flight and friends: the
// count including the call itself); Reconstructed comes from the calls'
// intervals [ts − held_ms, ts).
type LanePeak struct {
	Lane string `json:"lane"` // the policy's lane name
	// ID is what one count of the lane covers: the task id, tier, user id
	// or field value ("(none)": empty); "" for a cluster lane. A lane keyed
	// by a field keeps Options.MaxUsers ids, then "(other keys)".
	ID string `json:"id,omitempty"`
	// Calls counts the lines that recorded a count for this lane.
	Calls     int64     `json:"calls"`
	Peak      int       `json:"peak"`
	PeakLimit int       `json:"peak_limit"` // the limit recorded with the peak
	PeakAt    time.Time `json:"peak_at"`
	MinLimit  int       `json:"min_limit"` // the range of the limits recorded
	MaxLimit  int       `json:"max_limit"`
	// OverLimit counts the lines whose count exceeded their limit.
	OverLimit       int64     `json:"over_limit"`
	Reconstructed   int       `json:"reconstructed_peak"`
	ReconstructedAt time.Time `json:"reconstructed_at"`
}

// UserPeaks holds the busiest users' lanes: the policy's first lane keyed
// by user (OCL: user); none when it has no such lane. Per-user state is
// kept for at most Options.MaxUsers users; later users are folded into one
// "(other users)" entry and counted in Folded.
type UserPeaks struct {
	Seen   int64      `json:"seen"`
	Folded int64      `json:"folded"`
	Top    []LanePeak `json:"top"` // by recorded peak, then id
}

// Refusals gives the shadow-refusal rates. Calls counts the calls the gate
// counted (every decision but unavailable); Rate = ShadowRefused / Calls.
type Refusals struct {
	Rate
	ByLane   []Rate `json:"by_lane"`   // a call counts for a lane when the lane was in its full list
	ByTier   []Rate `json:"by_tier"`   // in the policy's tier order
	TopUsers []Rate `json:"top_users"` // by shadow-refused calls, then refused, then name
}

// Rate is one row of refusal counts.
type Rate struct {
	Name          string  `json:"name,omitempty"`
	Calls         int64   `json:"calls"`
	ShadowRefused int64   `json:"shadow_refused"`
	Refused       int64   `json:"refused"`
	Rate          float64 `json:"rate"` // ShadowRefused / Calls; 0 without calls
}

// Percentiles of a duration in milliseconds, nearest rank. Values up to
// 2047 ms are exact; larger ones are within 0.4 % (a log-linear
// histogram keeps memory bounded). Max is exact.
type Percentiles struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
	P99   int64 `json:"p99"`
	Max   int64 `json:"max"`
}

// Unavailability describes the calls the limiter could not count. A
// window is a run of unavailable calls with store errors on one task
// (gateway), ended by the next call that task counted, unless another
// store-unavailable call follows within 15 s (the gateway's skip window;
// an unavailable line is placed at its ts, when the call ended, as it has
// no held_ms).
type Unavailability struct {
	Calls       int64 `json:"calls"`
	StoreErrors int64 `json:"store_errors"` // unavailable because of the lane store
	Other       int64 `json:"other"`        // identity lookups, internal errors
	// Degraded counts the unavailable calls the gateway's local lanes
	// counted ("degraded": true), DegradedRefused the calls they refused
	// while the store was unavailable. Degraded lines' counts and limits
	// are the local lanes', so they are left out of peaks, rates and
	// replays.
	Degraded        int64            `json:"degraded"`
	DegradedRefused int64            `json:"degraded_refused"`
	Errors          map[string]int64 `json:"errors"`  // by error text; at most 20, then "(other)"
	Windows         []Window         `json:"windows"` // in time order; at most 1000
	LeftOut         int64            `json:"windows_left_out"`
}

// Window is one run of store-unavailable calls on a task.
type Window struct {
	Task       string    `json:"task,omitempty"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS int64     `json:"duration_ms"`
	Calls      int64     `json:"calls"`
	Error      string    `json:"error"` // the first call's error
}

// Reconstruction checks the intervals against the log: each counted call's
// lane counts are rebuilt from the calls whose interval [start, end)
// contains its start, and its decision from those counts and the limits
// its line recorded.
type Reconstruction struct {
	Calls          int64   `json:"calls"`
	CountsAgree    int64   `json:"counts_agree"`    // every recorded count rebuilt exactly
	DecisionsAgree int64   `json:"decisions_agree"` // full or not, as logged
	Agreement      float64 `json:"agreement"`       // DecisionsAgree / Calls
	// NearTies counts the disagreements where another call started or
	// ended within 2 ms of the call's start: ts and held_ms are truncated
	// to the millisecond, so the order there is lost.
	NearTies int64 `json:"near_ties"`
	// Late counts calls whose start came more than the horizon before a
	// line already read; they were replayed at the horizon's edge.
	Late      int64 `json:"late"`
	HorizonMS int64 `json:"horizon_ms"`
}

// WhatIf is the replay of the calls against a changed config.
type WhatIf struct {
	Changes map[string][2]any `json:"changes"` // dotted path: [base, what-if]
	// Config is the config replayed: its document, keys in the config's
	// order.
	Config settings.Config `json:"config"`
	// Calls counts the calls replayed: every decision but unavailable.
	Calls     int64            `json:"calls"`
	Decisions map[string]int64 `json:"decisions"`
	// Refused counts calls the changed config would refuse; NewlyRefused
	// those among them the log did not record as refused.
	Refused      int64  `json:"refused"`
	NewlyRefused int64  `json:"newly_refused"`
	ByLane       []Rate `json:"by_lane"` // Refused: calls refused with the lane full
	ByTier       []Rate `json:"by_tier"`
	// ExtraWaitSeconds is the sum of Retry-After over the refused calls:
	// an estimate of the wait clients would have seen (retries not
	// modelled).
	ExtraWaitSeconds int64 `json:"extra_wait_seconds"`
	// Agreement compares each replayed decision with the logged one.
	Agreement Agreement `json:"agreement"`
	// NoLease counts calls refused in the log that the replay admits; they
	// never ran, so they hold no lease in the replay.
	NoLease int64    `json:"no_lease"`
	Notes   []string `json:"notes"`
	// Fairness replays the config's fairness.by over the calls that
	// waited in the log; nil (left out) when none did.
	Fairness *Fairness `json:"fairness,omitempty"`
}

// Fairness is the share of the contended time each user would get under
// a fairness.by, against the log's: by users whose calls waited for a
// slot, at most 20 (those that held the most).
type Fairness struct {
	By    string     `json:"by"`
	Users []FairUser `json:"users"`
}

// FairUser is one user's calls that waited: how many, the seat-ms they
// held, the mean, and the user's share of the held time as logged and as
// the fairness replayed gives it while they all wait (by calls: its mean
// call over the sum of the means; by time or usage: an equal share).
type FairUser struct {
	User       string  `json:"user"`
	Waited     int64   `json:"waited"`
	HeldSeatMS int64   `json:"held_seat_ms"`
	MeanHeldMS float64 `json:"mean_held_ms"`
	Logged     float64 `json:"logged_share"`
	Replayed   float64 `json:"replayed_share"`
}

// Agreement counts replayed decisions equal to the logged ones; Changed
// counts the others as "logged→replayed".
type Agreement struct {
	Compared int64            `json:"compared"`
	Same     int64            `json:"same"`
	Rate     float64          `json:"rate"`
	NearTies int64            `json:"near_ties"` // as in Reconstruction
	Changed  map[string]int64 `json:"changed"`
}

// Timeline holds the charts' data in equal buckets from Start: per series,
// the most calls in flight (reconstructed) and the largest limit recorded
// in each bucket; and the refusals that started in each bucket.
type Timeline struct {
	Start         time.Time `json:"start"`
	BucketMS      int64     `json:"bucket_ms"`
	Series        []Series  `json:"series"`
	ShadowRefused []int64   `json:"shadow_refused"`
	Refused       []int64   `json:"refused"`
	WhatIfRefused []int64   `json:"what_if_refused,omitempty"`
}

// Series is one lane's line on the in-flight chart.
type Series struct {
	Name     string `json:"name"`
	InFlight []int  `json:"in_flight"`
	Limit    []int  `json:"limit"` // -1: none recorded yet
}
