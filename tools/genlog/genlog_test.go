package genlog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/genlog"
)

// A log under another policy is made of that policy's calls: its event,
// routes, tiers and fields, and its config key in the noise.
func TestGenerateAnotherPolicy(t *testing.T) {
	p, err := policy.Load("../../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := genlog.Generate(t.Context(), &buf, genlog.Options{Policy: p, Calls: 2000, NoiseEvery: 50, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	routes, tiers, models := map[string]int{}, map[string]int{}, map[string]int{}
	calls, configLines := 0, 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch m["event"] {
		case "capgate_call":
			calls++
			routes[m["route"].(string)]++
			tiers[m["tier"].(string)]++
			models[m["model"].(string)]++
			for _, k := range []string{"cluster_limit", "model_limit", "user_limit"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("line lacks %s: %s", k, sc.Text())
				}
			}
		case "capgate_call_config":
			configLines++
			if _, ok := m["changes"].(map[string]any)["lanes.user.free"]; !ok {
				t.Errorf("config line changes no key of the policy: %s", sc.Text())
			}
		default:
			if m["event"] != nil {
				t.Errorf("line of another event: %s", sc.Text())
			}
		}
	}
	if calls != st.Calls || calls != 2000 || configLines == 0 {
		t.Errorf("%d call lines, %d config lines; stats %+v", calls, configLines, st)
	}
	for name, got := range map[string]map[string]int{"routes": routes, "tiers": tiers, "models": models} {
		want := map[string][]string{"routes": {"chat", "completions", "embeddings"}, "tiers": {"free", "pro"},
			"models": {"model-0", "model-1", "model-2", "model-3"}}[name]
		var keys []string
		for k, n := range got {
			keys = append(keys, k)
			if n < 50 {
				t.Errorf("%s %s: %d calls, want a mix", name, k, n)
			}
		}
		if slices.Sort(keys); !slices.Equal(keys, want) {
			t.Errorf("%s %v, want %v", name, keys, want)
		}
	}
}

func TestGeneratePolicyMismatch(t *testing.T) {
	p, err := policy.Load("../../examples/inference/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ocl := settings.Default(nil, settings.ModeShadow)
	var buf bytes.Buffer
	if _, err := genlog.Generate(t.Context(), &buf, genlog.Options{Policy: p, Config: &ocl}); !errors.Is(err, genlog.ErrPolicyMismatch) {
		t.Errorf("Generate = %v, want ErrPolicyMismatch", err)
	}
}
