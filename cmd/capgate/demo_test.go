package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemoTellsTheStory runs a short demo, shadow then enforce, and checks
// what it tells: shadow takes the API past its knee and refuses nothing,
// enforce holds the API at its knee with no call failed by it, the limits
// printed are the lanes', and capgate analyze of its log reports the same
// decisions as its summary.
func TestDemoTellsTheStory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for a few seconds")
	}
	logFile := filepath.Join(t.TempDir(), "demo.log")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"demo", "--duration", "6s", "--log-file", logFile}, nil, &out, &errOut)
	text := out.String()
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errOut.String(), text)
	}
	for _, want := range []string{"building the pieces: the simulated API", "building the pieces: the gateway",
		"== shadow for 3s", "== enforce for 3s", "shadow (3s)", "enforce (3s)"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	peak := demoCells(t, text, "most at once in the API")
	if demoNum(t, peak[0]) <= 4 || !strings.Contains(peak[0], "past the knee") {
		t.Errorf("shadow: the API ran %q at once, want past its knee of 4", peak[0])
	}
	if demoNum(t, peak[1]) > 4 || strings.Contains(peak[1], "past") {
		t.Errorf("enforce: the API ran %q at once, want at most its knee of 4 (api_heavy.cluster)", peak[1])
	}
	if failed := demoCells(t, text, "failed by the API (503, overloaded)"); demoNum(t, failed[1]) != 0 {
		t.Errorf("enforce: the API failed %s calls, want 0", failed[1])
	}
	if r := demoCells(t, text, "refused (429), retried by the client"); demoNum(t, r[0]) != 0 {
		t.Errorf("shadow refused %s calls", r[0])
	}
	if w := demoCells(t, text, "calls that waited at the gateway"); demoNum(t, w[0]) != 0 {
		t.Errorf("shadow: %s calls waited, want none", w[0])
	}
	// api_heavy's limit is printed as the lanes apply it, the live line
	// and the peaks agreeing.
	if !regexp.MustCompile(`(?m)^api_heavy\s+4 \(bulk 3\)\s`).MatchString(text) || !strings.Contains(text, "api_heavy ") ||
		!regexp.MustCompile(`api_heavy \d+/4 \(bulk 3\)`).MatchString(text) {
		t.Errorf("api_heavy's limit not shown as 4 (bulk 3) in the peaks and the live lines:\n%s", text)
	}
	enforceLine, _, _ := strings.Cut(text[strings.Index(text, "enforce: the API"):], "\n")
	if strings.Contains(enforceLine, "shadow") {
		t.Errorf("the enforce summary mentions shadow:\n%s", text)
	}
	if !regexp.MustCompile(`Side by side: enforce got \d+ rows done against \d+ in shadow; users' bulk \$match p50 \S+ against \S+\.`).MatchString(text) {
		t.Errorf("no side-by-side sentence:\n%s", text)
	}

	m := regexp.MustCompile(`(?m)^all\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no summary row in:\n%s", text)
	}
	summary := map[string]int{}
	for i, d := range []string{"admitted", "shadow-refused", "refused", "unavailable"} {
		n, _ := strconv.Atoi(m[i+1])
		if n > 0 {
			summary[d] = n
		}
	}
	if len(summary) == 0 {
		t.Fatalf("the demo gated no call:\n%s", text)
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
}

// demoCells returns the two columns (shadow's, then enforce's) of the
// demo's side-by-side row label.
func demoCells(t *testing.T, text, label string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + `\s{2,}(.+?)\s{2,}(.+?)\s*$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no row %q in:\n%s", label, text)
	}
	return m[1:]
}

// demoNum returns the number a demo cell starts with.
func demoNum(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.Fields(s)[0])
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
