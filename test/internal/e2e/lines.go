package e2e

import (
	"testing"
	"time"
)

// GateLine is the part of an ocl_capacity line the suites read.
type GateLine struct {
	Event    string `json:"event"`
	Decision string `json:"decision"`
	UserID   string `json:"user_id"`
	Tier     string `json:"tier"`
	CID      string `json:"cid"`
	// Degraded marks a call counted by a gateway's local lanes while the
	// store was out: counted, though "unavailable".
	Degraded bool   `json:"degraded"`
	HeldMS   *int64 `json:"held_ms"`
}

// UnidentifiedUser is capgate.UnidentifiedUser: the suites read only what
// the binary logs.
const UnidentifiedUser = "(unidentified)"

// GateLines returns the ocl_capacity lines of the log files, by cid.
func GateLines(t testing.TB, logs []string) map[string]GateLine {
	t.Helper()
	m := map[string]GateLine{}
	for _, path := range logs {
		for _, l := range ReadLines[GateLine](t, path) {
			if l.Event == "ocl_capacity" {
				m[l.CID] = l
			}
		}
	}
	return m
}

// AwaitGateLines returns GateLines once every one of cids has a line, or
// as they are after 5 s: a process writes a call's line at its release,
// after the response, so it may trail the response a test read.
func AwaitGateLines(t testing.TB, logs, cids []string) map[string]GateLine {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := GateLines(t, logs)
		missing := 0
		for _, cid := range cids {
			if _, ok := lines[cid]; !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(20 * time.Millisecond) // other processes' files: no event to wait on
	}
}
