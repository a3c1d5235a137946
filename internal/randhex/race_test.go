//go:build race

package randhex_test

// The race detector adds allocations, so the allocation test skips under it.
const raceEnabled = true
