package capgate

import (
	"testing"
	"time"

	"github.com/capgate/capgate/settings"
)

// deadlineStore is a LaneStore that reports its own operation deadline.
type deadlineStore struct {
	LaneStore
	d time.Duration
}

func (s deadlineStore) Caps() StoreCaps { return StoreCaps{Deadline: s.d, Bounded: true} }

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
		mode  settings.Mode
		for_  settings.EnforceFor
		aware bool
		want  bool
	}{
		{settings.ModeEnforce, settings.EnforceAll, false, true},
		{settings.ModeEnforce, settings.EnforceAware, false, false},
		{settings.ModeEnforce, settings.EnforceAware, true, true},
		{settings.ModeShadow, settings.EnforceAll, true, false},
		{settings.ModeOff, settings.EnforceAll, true, false},
	}
	for _, tt := range tests {
		c := settings.Config{Mode: tt.mode, EnforceFor: tt.for_}
		if got := c.Enforces(tt.aware); got != tt.want {
			t.Errorf("%s/%s aware=%v: enforces = %v, want %v", tt.mode, tt.for_, tt.aware, got, tt.want)
		}
	}
}
