package http

import (
	"testing"

	"github.com/capgate/capgate"
)

func TestRefusalBody(t *testing.T) {
	got := string(refusalBody(capgate.LaneUser, false, 5))
	want := `{"detail":"Matching is busy. Please retry in 5 seconds.","error_code":"capacity_exceeded","scope":"user","paused":false,"retry_after":5}`
	if got != want {
		t.Fatalf("body = %s\nwant   %s", got, want)
	}
}
