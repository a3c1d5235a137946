package demo_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/demo"
	"github.com/capgate/capgate/settings"
)

// A demo's settings are checked before it builds anything: each wrong
// one is an error naming it, and nothing is printed.
func TestDemoRefusesWhatItCannotRun(t *testing.T) {
	ok := demo.Demo{Duration: time.Second, PerTier: 1}
	for _, tc := range []struct {
		name string
		edit func(*demo.Demo)
		want string
	}{
		{"no duration", func(d *demo.Demo) { d.Duration = 0 }, "duration"},
		{"no users", func(d *demo.Demo) { d.PerTier = 0 }, "users per tier"},
		{"too many users", func(d *demo.Demo) { d.PerTier = 51 }, "users per tier"},
		{"mode off", func(d *demo.Demo) { d.Modes = []settings.Mode{settings.ModeOff} }, "mode"},
		{"no policy file", func(d *demo.Demo) { d.PolicyFile = t.TempDir() + "/none.yaml" }, "policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			d := ok
			d.Stdout, d.Stderr = &out, &out
			tc.edit(&d)
			err := d.Run(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error naming %q", err, tc.want)
			}
			if out.Len() > 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}
