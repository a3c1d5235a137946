package capgate

import (
	"testing"
	"time"
)

// deadlineStore is a LaneStore that reports its own operation deadline.
type deadlineStore struct {
	LaneStore
	d time.Duration
}

func (s deadlineStore) Deadline() time.Duration { return s.d }

func TestStoreDeadlineIsTheStores(t *testing.T) {
	tests := []struct {
		store LaneStore
		want  time.Duration
	}{
		{nil, DefaultStoreDeadline},
		{deadlineStore{d: 250 * time.Millisecond}, 250 * time.Millisecond},
		{deadlineStore{d: 0}, DefaultStoreDeadline},
	}
	for _, tt := range tests {
		g := &Gate{Store: tt.store}
		if got := g.storeDeadline(); got != tt.want {
			t.Errorf("storeDeadline() with %#v = %v, want %v", tt.store, got, tt.want)
		}
	}
}

func TestEnforces(t *testing.T) {
	tests := []struct {
		mode  Mode
		for_  EnforceFor
		aware bool
		want  bool
	}{
		{ModeEnforce, EnforceAll, false, true},
		{ModeEnforce, EnforceAware, false, false},
		{ModeEnforce, EnforceAware, true, true},
		{ModeShadow, EnforceAll, true, false},
		{ModeOff, EnforceAll, true, false},
	}
	for _, tt := range tests {
		c := Config{Mode: tt.mode, EnforceFor: tt.for_}
		if got := c.enforces(Call{Aware: tt.aware}); got != tt.want {
			t.Errorf("%s/%s aware=%v: enforces = %v, want %v", tt.mode, tt.for_, tt.aware, got, tt.want)
		}
	}
}
