package mock

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate"
)

var _ capgate.Sink = (*Sink)(nil)

// Sink keeps every line emitted to it, for tests; the zero value is ready.
// With Err set, Emit returns it and keeps nothing.
type Sink struct {
	Err error

	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced at each line; requires mu held
}

// Emit keeps a copy of line, or returns Err.
func (s *Sink) Emit(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Err != nil {
		return s.Err
	}
	s.lines = append(s.lines, string(line))
	if s.added != nil {
		close(s.added)
		s.added = nil
	}
	return nil
}

// Raw returns the lines as written.
func (s *Sink) Raw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// All returns the lines decoded as JSON objects (numbers as json.Number).
func (s *Sink) All(t testing.TB) []map[string]any {
	t.Helper()
	raw := s.Raw()
	out := make([]map[string]any, len(raw))
	for i, line := range raw {
		d := json.NewDecoder(bytes.NewReader([]byte(line)))
		d.UseNumber()
		if err := d.Decode(&out[i]); err != nil {
			t.Fatalf("log line %d is not JSON: %v: %s", i, err, line)
		}
	}
	return out
}

// Wait waits, at most limit, until n lines have been written, and returns
// them decoded.
func (s *Sink) Wait(t testing.TB, n int, limit time.Duration) []map[string]any {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		s.mu.Lock()
		have := len(s.lines)
		if s.added == nil {
			s.added = make(chan struct{})
		}
		added := s.added
		s.mu.Unlock()
		if have >= n {
			return s.All(t)
		}
		select {
		case <-added:
		case <-timer.C:
			t.Fatalf("waited for %d log lines, have %d", n, have)
		}
	}
}
