package postgres_test

import (
	"testing"

	"github.com/capgate/capgate/internal/skipnote"
)

// TestMain ends the run with a line per suite skipped for want of a real
// service, saying what to set to run it.
func TestMain(m *testing.M) { skipnote.Main(m) }
