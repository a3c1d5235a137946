package memory_test

import (
	"testing"
	"time"

	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/journaltest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
)

var _ journal.Store = (*memory.Store)(nil)

func TestJournalStore(t *testing.T) {
	journaltest.Run(t, func(t testing.TB) (journal.Store, func(time.Duration)) {
		clock := mock.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		return memory.New(clock.Now), clock.Advance
	})
}
