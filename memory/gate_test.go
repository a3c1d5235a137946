package memory_test

import (
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
)

func TestGate(t *testing.T) {
	lanetest.RunGate(t, func(t testing.TB) lanetest.Store {
		return memory.TestStore{Store: memory.New(nil)}
	})
}

func TestWaitlist(t *testing.T) {
	lanetest.RunWaitlist(t, func(t testing.TB) lanetest.WaitStore {
		return memory.TestStore{Store: memory.New(nil)}
	})
}

func TestGateWithLocalLanes(t *testing.T) {
	lanetest.RunGateWithLocalLanes(t, func(t testing.TB) lanetest.Store {
		return memory.TestStore{Store: memory.New(nil)}
	}, func() capgate.LaneStore { return memory.New(nil) })
}

func TestTune(t *testing.T) {
	lanetest.RunTune(t, func(t testing.TB, clock *mock.Clock) lanetest.TuneStore {
		return memory.New(clock.Now)
	})
}

func TestRepeats(t *testing.T) {
	lanetest.RunRepeats(t, func(t testing.TB) (lanetest.RepeatStore, func(time.Duration)) {
		clock := mock.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		return memory.New(clock.Now), clock.Advance
	})
}
