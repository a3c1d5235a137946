package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tools/genlog"
)

func TestAnalyzeCLIPolicy(t *testing.T) {
	dir := t.TempDir()
	polFile := filepath.Join("..", "..", "examples", "inference", "policy.yaml")
	p, err := policy.Load(polFile)
	if err != nil {
		t.Fatal(err)
	}
	log := genLog(t, dir, "gw.log", genlog.Options{Policy: p, Calls: 2000, Rate: 3, Seed: 5})
	code, out, errs := runCLI(t, nil, "analyze", "--policy", polFile, log, "--what-if", "mode=enforce", "enforce_for=all", "lanes.model=1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"capgate analyze: 2000 capgate_call lines", "  route chat ", "  model:model-0 ",
		"What if: enforce_for aware→all, lanes.model 8→1, mode shadow→enforce"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Read as OCL's (the default, or "ocl"), its lines are other events.
	for _, args := range [][]string{{"analyze", log}, {"analyze", "--policy=ocl", log}} {
		code, out, errs = runCLI(t, nil, args...)
		if code != 0 || !strings.Contains(out, "capgate analyze: 0 ocl_capacity lines") || !strings.Contains(out, "capgate_call 2000") {
			t.Errorf("%q: exit %d: %s%s", args, code, out, errs)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nname: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"analyze", "--policy", polFile, "--what-if", "api_heavy.cluster=2"}, 2, `Unknown setting "api_heavy".`},
		{[]string{"analyze", "--policy", bad, log}, 2, "--policy: " + bad + ":"},
		{[]string{"analyze", "--policy", filepath.Join(dir, "missing.yaml"), log}, 1, "read policy"},
		{[]string{"analyze", "--policy"}, 2, "--policy needs a value"},
	} {
		code, _, errs := runCLI(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.msg) {
			t.Errorf("%q: exit %d, %q; want %d, %q", tt.args, code, errs, tt.code, tt.msg)
		}
	}
}
