package server

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate/settings"
)

// ParseDuration reads a duration the one way every capgate setting takes
// it: a Go duration ("10s", "500ms", "1m30s"), or a plain number in unit
// ("10" seconds for the CAPACITY_*_SECONDS variables and their flags,
// "500" milliseconds for the _MS one), as the original implementation's
// variables were. Negative values are refused.
func ParseDuration(v string, unit time.Duration) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 {
			return 0, errors.New("negative")
		}
		return time.Duration(f * float64(unit)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("negative")
	}
	return d, nil
}

// unitName is "seconds" or "milliseconds".
func unitName(unit time.Duration) string {
	if unit == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// DurationValue is a duration flag that takes what ParseDuration takes.
type DurationValue struct {
	D    *time.Duration
	Unit time.Duration // what a bare number counts
}

func (v DurationValue) String() string {
	if v.D == nil {
		return ""
	}
	return v.D.String()
}

func (v DurationValue) Set(s string) error {
	d, err := ParseDuration(s, v.Unit)
	if err != nil {
		return fmt.Errorf("want a duration such as 10s or 500ms, or a number of %s", unitName(v.Unit))
	}
	*v.D = d
	return nil
}

// modeValue is the --mode flag: off, shadow or enforce, nothing else.
type modeValue struct{ m *settings.Mode }

func (v modeValue) String() string {
	if v.m == nil {
		return ""
	}
	return string(*v.m)
}

func (v modeValue) Set(s string) error {
	m, err := parseMode(s)
	if err != nil {
		return err
	}
	*v.m = m
	return nil
}

// parseMode reads a boot mode; a typo is an error, never a silent shadow.
func parseMode(s string) (settings.Mode, error) {
	m, ok := settings.ParseMode(strings.TrimSpace(s))
	if !ok {
		return "", fmt.Errorf("%q is not a mode: use off, shadow or enforce", s)
	}
	return m, nil
}
