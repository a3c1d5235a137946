package randhex_test

import (
	"encoding/hex"
	"testing"

	"github.com/capgate/capgate/internal/randhex"
)

func TestString(t *testing.T) {
	for _, n := range []int{0, 1, 6, 16, 32, 33, 100} {
		s := randhex.String(n)
		if len(s) != 2*n {
			t.Errorf("String(%d) = %q, %d characters; want %d", n, s, len(s), 2*n)
		}
		if b, err := hex.DecodeString(s); err != nil || len(b) != n {
			t.Errorf("String(%d) = %q: not lowercase hex of %d bytes (%v)", n, s, n, err)
		}
		for _, c := range s {
			if c >= 'A' && c <= 'F' {
				t.Errorf("String(%d) = %q; want lowercase", n, s)
				break
			}
		}
	}
	seen := map[string]bool{}
	for range 1000 {
		s := randhex.String(16)
		if seen[s] {
			t.Fatalf("String(16) repeated %q", s)
		}
		seen[s] = true
	}
}

func TestStringAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if n := testing.AllocsPerRun(100, func() { _ = randhex.String(16) }); n > 1 {
		t.Errorf("String(16) allocates %v times; want 1 (the string)", n)
	}
}
