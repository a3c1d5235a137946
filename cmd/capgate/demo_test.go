package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDemoSummaryMatchesAnalyze runs a short demo and checks that capgate
// analyze of its log reports the same decisions as the demo's summary.
func TestDemoSummaryMatchesAnalyze(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for a few seconds")
	}
	for _, mode := range []string{"shadow", "enforce"} {
		t.Run(mode, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "demo.log")
			var out, errOut bytes.Buffer
			code := Run(context.Background(), []string{"demo", "--duration", "4s", "--mode", mode, "--log-file", logFile},
				nil, &out, &errOut)
			if code != 0 {
				t.Fatalf("demo exited %d: %s\n%s", code, errOut.String(), out.String())
			}
			m := regexp.MustCompile(`(?m)^all\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no summary row in:\n%s", out.String())
			}
			summary := map[string]int{}
			for i, d := range []string{"admitted", "shadow-refused", "refused", "unavailable"} {
				n, _ := strconv.Atoi(m[i+1])
				if n > 0 {
					summary[d] = n
				}
			}
			if len(summary) == 0 {
				t.Fatalf("the demo gated no call:\n%s", out.String())
			}
			if mode == "shadow" && summary["refused"] != 0 {
				t.Fatalf("shadow demo refused calls: %v", summary)
			}
			var aout, aerr bytes.Buffer
			if code := Run(context.Background(), []string{"analyze", "--json", logFile}, nil, &aout, &aerr); code != 0 {
				t.Fatalf("analyze exited %d: %s", code, aerr.String())
			}
			var rep struct {
				Calls struct {
					ByDecision map[string]int `json:"by_decision"`
				} `json:"calls"`
			}
			if err := json.Unmarshal(aout.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			for d, n := range summary {
				if rep.Calls.ByDecision[d] != n {
					t.Errorf("%s: demo summary %d, analyze %d", d, n, rep.Calls.ByDecision[d])
				}
			}
			if len(rep.Calls.ByDecision) != len(summary) {
				t.Errorf("analyze decisions %v, demo %v", rep.Calls.ByDecision, summary)
			}
		})
	}
}
