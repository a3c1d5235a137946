//go:build race

package jsontmpl_test

// The race detector adds allocations, so the allocation tests skip under it.
const raceEnabled = true
