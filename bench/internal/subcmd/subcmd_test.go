package subcmd_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/capgate/capgate/bench/internal/subcmd"
)

func TestRun(t *testing.T) {
	var got []string
	cmds := map[string]func([]string) error{
		"seed": func(args []string) error { got = args; return nil },
		"run":  func([]string) error { return errors.New("boom") },
	}
	for _, tt := range []struct {
		args       []string
		code       int
		stderr     string
		seedCalled []string
	}{
		{nil, 2, "usage: fleet run|seed [flags]\n", nil},
		{[]string{"seed", "-n", "3"}, 0, "", []string{"-n", "3"}},
		{[]string{"run"}, 1, "fleet: boom\n", nil},
		{[]string{"walk"}, 1, "fleet: unknown command \"walk\"\n", nil},
	} {
		got = nil
		var stderr strings.Builder
		if code := subcmd.Run("fleet", tt.args, &stderr, cmds); code != tt.code || stderr.String() != tt.stderr {
			t.Errorf("Run(%q) = %d, stderr %q; want %d, %q", tt.args, code, stderr.String(), tt.code, tt.stderr)
		}
		if !slices.Equal(got, tt.seedCalled) {
			t.Errorf("Run(%q): seed got %q; want %q", tt.args, got, tt.seedCalled)
		}
	}
}
