//go:build race

package policy_test

// The race detector adds allocations (sync.Pool drops items at random
// under it, so json.Valid's scanner is not reused), so the allocation test
// skips under it.
const raceEnabled = true
