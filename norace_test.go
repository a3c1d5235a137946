//go:build !race

package capgate_test

const raceEnabled = false
