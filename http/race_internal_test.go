//go:build race

package http

// The race detector adds allocations, so the allocation tests skip under it.
const raceEnabled = true
