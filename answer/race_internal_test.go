//go:build race

package answer

// The race detector adds allocations, so the allocation tests skip under it.
const raceEnabled = true
