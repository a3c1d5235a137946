//go:build !race

package randhex_test

const raceEnabled = false
