package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	newFS := func() (*flag.FlagSet, *int) {
		fs := flag.NewFlagSet("capgate x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.Int("n", 1, "how many")
	}
	fs, n := newFS()
	var out strings.Builder
	if done, err := parseFlags(fs, []string{"-n", "3"}, "Usage: x\n", &out); done || err != nil || *n != 3 || out.Len() != 0 {
		t.Errorf("good flags: done %v, err %v, n %d, printed %q; want not done, n 3, nothing printed", done, err, *n, out.String())
	}
	fs, _ = newFS()
	done, err := parseFlags(fs, []string{"-h"}, "Usage: x\n", &out)
	if !done || err != nil || !strings.HasPrefix(out.String(), "Usage: x\n") || !strings.Contains(out.String(), "how many") {
		t.Errorf("-h: done %v, err %v, printed %q; want done, no error, the usage and the flags", done, err, out.String())
	}
	out.Reset()
	fs, _ = newFS()
	done, err = parseFlags(fs, []string{"-m"}, "Usage: x\n", &out)
	var ue *UsageError
	if !done || !errors.As(err, &ue) || !strings.Contains(ue.Msg, "-m") || !strings.Contains(ue.Msg, "how many") || out.Len() != 0 {
		t.Errorf("bad flag: done %v, err %v, printed %q; want done, a UsageError naming it with the help", done, err, out.String())
	}
}
