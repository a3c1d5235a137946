package redis_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capgate/capgate/redis"
)

// seatsUse matches a call of one of seats.lua's functions.
var seatsUse = regexp.MustCompile(`\b(seat|add_seats|renew_seats|drop_seats)\(`)

// TestSeatsPreludeOnce checks that a call's seats (token, token#2, ...)
// are spelled in seats.lua alone: no other script builds a seat's member,
// and every script that calls the prelude's functions runs with the
// prelude at its head.
func TestSeatsPreludeOnce(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Lua scripts found")
	}
	for _, f := range files {
		if f == "seats.lua" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if strings.Contains(code, "'#'") || strings.Contains(code, `"#"`) || strings.Contains(code, "'#2'") ||
				strings.Contains(code, "function add_seats") || strings.Contains(code, "function drop_seats") {
				t.Errorf("%s:%d spells a seat itself (seats.lua's job): %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	for name, sc := range redis.Scripts {
		body := strings.TrimPrefix(sc.Src, redis.SeatsSrc)
		if seatsUse.MatchString(body) && !strings.HasPrefix(sc.Src, redis.SeatsSrc) {
			t.Errorf("%s calls seats.lua's functions without it at its head", name)
		}
	}
	for _, name := range []string{"acquire.lua", "renew.lua", "release.lua", "waitjoin.lua", "waitpump.lua", "waitleave.lua", "waitrelease.lua", "waiting.lua"} {
		if !seatsUse.MatchString(strings.TrimPrefix(redis.Scripts[name].Src, redis.SeatsSrc)) {
			t.Errorf("%s does not use seats.lua", name)
		}
	}
}
