package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/tools/simapi"
)

// aliasBombPolicy returns the inference example with aliases at the any,
// when and route levels, k at each: a file of a few KB whose policy, with
// the aliases expanded, holds about 3·k³ nodes.
func aliasBombPolicy(t *testing.T, k int) string {
	t.Helper()
	var when strings.Builder
	when.WriteString("    when: &when\n      - any: &any\n          - &pred {header_present: X-A}\n")
	when.WriteString(strings.Repeat("          - *pred\n", k-1))
	when.WriteString(strings.Repeat("      - any: *any\n", k-1))
	text := edit(t, readInferencePolicy(t), "  - name: chat\n    method: POST\n    path: {exact: /v1/chat/completions}\n",
		"  - &chat\n    name: chat\n    method: POST\n    path: {exact: /v1/chat/completions}\n"+when.String())
	return edit(t, text, "\nidentity:", strings.Repeat("  - *chat\n", k-1)+"\nidentity:")
}

// Why: an alias bomb of 21.5 KB took `capgate policy check` past 1.5 GiB
// and out of memory, and a serving gateway sent SIGHUP with it did the
// same. check, serve and the reload now refuse it at once, naming the
// node budget, and a reload keeps the policy in force.
func TestPolicyNodeBudgetInCheckServeAndReload(t *testing.T) {
	clearLaneEnv(t)
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.yaml")
	writeFile(t, bomb, aliasBombPolicy(t, 40))
	budget := fmt.Sprintf("more than %d YAML nodes", policy.MaxNodes)

	code, out, errs := runPolicy(t, "check", bomb)
	if code != 1 || out != "" || !strings.Contains(errs, bomb+":1: ") || !strings.Contains(errs, budget) {
		t.Errorf("check the bomb: exit %d, stdout %q, stderr %q; want 1 and the node budget", code, out, errs)
	}

	db := "sqlite:" + filepath.Join(dir, "c.db")
	code, _, errs = run(t, "serve", "--policy", bomb, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--database", db)
	if code == 0 || !strings.Contains(errs, budget) || strings.Contains(errs, "capgate serving") {
		t.Errorf("serve with the bomb: exit %d, stderr %q; want refused with the node budget", code, errs)
	}

	// SIGHUP with the bomb: refused, the policy in force stays.
	polFile := filepath.Join(dir, "policy.yaml")
	writeFile(t, polFile, readInferencePolicy(t))
	tokens := writeInferenceTokens(t, dir)
	srv, addr, stderr := startServer(t, &simapi.Inference{Latency: time.Millisecond}, "--policy", polFile, "--identity", "tokens", "--tokens", tokens)
	writeFile(t, polFile, aliasBombPolicy(t, 40))
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), budget) {
		t.Errorf("Reload with the bomb: %v; want the node budget", err)
	}
	if !strings.Contains(stderr.String(), "keeping what was in force") {
		t.Errorf("the refused reload is not logged:\n%s", stderr)
	}
	c := callAPI(t, addr, http.MethodPost, "/v1/chat/completions", tokPia, "small")
	if c.code != http.StatusOK || c.header.Get("Capgate-Limit") != "8" {
		t.Errorf("after the bomb: chat %d, Capgate-Limit %q; want 200 under the policy in force (8)", c.code, c.header.Get("Capgate-Limit"))
	}
}
