package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// examplePolicy returns the path of the inference example's policy, from
// the module's root above the working directory.
func examplePolicy(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "examples", "inference", "policy.yaml")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no examples/inference/policy.yaml above the working directory")
		}
		dir = up
	}
}

// TestDemoUnderAPolicy runs a short demo under the inference policy and
// checks what it tells: its users are of the policy's tiers, its calls of
// the policy's routes; its upstream the batching engine, whose knee is in
// tokens; in enforce the API fails nothing, no call waits for a model's
// cache and every lane holds (the model lane per model, the user lane per
// tier), the config line names the policy's lanes, and capgate analyze of
// its log reports the same decisions as its summary.
func TestDemoUnderAPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for a few seconds")
	}
	pol := examplePolicy(t)
	logFile := filepath.Join(t.TempDir(), "demo.log")
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"demo", "--policy", pol, "--duration", "6s", "--log-file", logFile}, nil, &out, &errOut)
	text := out.String()
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errOut.String(), text)
	}
	for _, want := range []string{"capgate_call lines: " + logFile, "(tiers: pro, free)", "== shadow for 3s", "== enforce for 3s",
		"its knee: each model's KV cache, small 4224, large 2112 tokens", "share of calls done: pro", "share of calls done: free",
		"The config in force now: mode enforce, enforce_for all, cluster 8, model 8 (large 4), user pro 3 / free 1."} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	for _, no := range []string{"$match", "api_heavy", "rows"} {
		if strings.Contains(text, no) {
			t.Errorf("the built-in policy's %q in a demo of another:\n%s", no, text)
		}
	}
	if failed := demoCells(t, text, "failed by the API (503, overloaded)"); demoNum(t, failed[1]) != 0 {
		t.Errorf("enforce: the API failed %s calls, want 0", failed[1])
	}
	if done := demoCells(t, text, "calls done / failed (the client retries 503s)"); demoNum(t, done[1]) == 0 || !strings.HasSuffix(done[1], "/ 0") {
		t.Errorf("enforce: calls done / failed %q, want some done and none failed", done[1])
	}
	if r := demoCells(t, text, "refused (429), retried by the client"); demoNum(t, r[0]) != 0 {
		t.Errorf("shadow refused %s calls", r[0])
	}
	if demoCells(t, text, "users' chat p50 / p99") == nil || demoCells(t, text, "users' embeddings p50 / p99") == nil {
		t.Error("no latency rows of the routes")
	}
	// The engine upstream, its knee in tokens: in enforce the gateway
	// keeps each model within its cache (the seats of its max_tokens), so
	// no call waits in the engine.
	if demoCells(t, text, "tokens generated, per second") == nil {
		t.Errorf("no tokens per second in:\n%s", text)
	}
	for _, m := range []string{"small", "large"} {
		if c := demoCells(t, text, "model "+m+": most cache held / calls waiting for it"); c != nil && !strings.HasSuffix(c[1], "/ 0") {
			t.Errorf("enforce: model %s %q; want no call waiting for its cache", m, c[1])
		}
	}
	// The peaks: a lane keyed by the model per model, the user lane per
	// tier; each within its limit in enforce.
	peaks := regexp.MustCompile(`(?m)^(cluster|model:\S+|user \(busiest, \w+\))\s+(\d+)\s+(\d+)[^\n]*?\s(\d+)\s*$`).FindAllStringSubmatch(text, -1)
	lanes := map[string]bool{}
	for _, m := range peaks {
		limit, _ := strconv.Atoi(m[2])
		enforce, _ := strconv.Atoi(m[4])
		lanes[m[1]] = true
		if enforce > limit {
			t.Errorf("lane %s: %d at once in enforce, limit %d", m[1], enforce, limit)
		}
	}
	if !lanes["cluster"] || !lanes["model:small"] || !lanes["user (busiest, free)"] || !lanes["user (busiest, pro)"] {
		t.Errorf("peaks of lanes %v; want cluster, model:small and the user lane of each tier in:\n%s", lanes, text)
	}

	m := regexp.MustCompile(`(?m)^all\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no summary row in:\n%s", text)
	}
	summary := map[string]int{}
	for i, d := range []string{"admitted", "shadow-refused", "refused", "unavailable"} {
		if n, _ := strconv.Atoi(m[i+1]); n > 0 {
			summary[d] = n
		}
	}
	var aout, aerr bytes.Buffer
	if code := Run(context.Background(), []string{"analyze", "--policy", pol, "--json", logFile}, nil, &aout, &aerr); code != 0 {
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
	if len(summary) == 0 || len(rep.Calls.ByDecision) != len(summary) {
		t.Errorf("analyze decisions %v, demo %v", rep.Calls.ByDecision, summary)
	}
	for d, n := range summary {
		if rep.Calls.ByDecision[d] != n {
			t.Errorf("%s: demo summary %d, analyze %d", d, n, rep.Calls.ByDecision[d])
		}
	}
}
