//go:build !race

package jsontmpl_test

const raceEnabled = false
