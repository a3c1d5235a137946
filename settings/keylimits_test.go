package settings_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// keyLimitsPolicy has a lane keyed by a call field (model) with a key
// limit of its own, and one keyed by the user.
const keyLimitsPolicy = `version: 1
name: kl
routes:
  - name: chat
    method: POST
    path: {exact: /chat}
    fields:
      model: {body_string: model}
identity: {resolver: tokens, scheme: Bearer, default_tier: free}
lanes:
  - name: model
    scope: key
    key: model
    routes: [chat]
    limit: 2
    key_limits: {large: 1, bge: 16}
  - name: user
    scope: key
    key: user
    routes: [chat]
    limit: 3
names:
  header_prefix: Capgate-
  refusal: {detail: "busy", error_code: busy}
  log_event: capgate_call
`

func mustPolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("kl.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A lane keyed by a call field takes a limit per key value: the policy's
// by default, changed at runtime under key_limits.<lane>.<value> like any
// limit (merged value by value, null removing one, dotted values given
// split), in the document and its diff, and read back from a stored
// version as it was saved.
func TestKeyLimits(t *testing.T) {
	c := settings.Default(mustPolicy(t, keyLimitsPolicy), settings.ModeShadow)
	if n, ok := c.KeyLimit(0, "large"); !ok || n != 1 {
		t.Errorf("default KeyLimit(model, large) = %d, %v; want the policy's 1", n, ok)
	}
	if _, ok := c.KeyLimit(0, "small"); ok {
		t.Error("small has a key limit; want the lane's")
	}
	b, err := jsonenc.Marshal(c)
	if err != nil || !strings.HasSuffix(string(b), `,"key_limits":{"model":{"bge":16,"large":1}}}`) {
		t.Errorf("JSON %s, %v; want the key limits last", b, err)
	}

	// As `capacity set key_limits.model.llama-3.1=4 key_limits.model.large=null` sends it.
	next, diff, err := c.Apply(settings.Patch(configtest.Doc(t,
		`{"key_limits": {"model": {"llama-3": {"1": 4}, "large": null, "bge": 8}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := next.KeyLimit(0, "llama-3.1"); !ok || n != 4 {
		t.Errorf("KeyLimit(llama-3.1) = %d, %v; want 4", n, ok)
	}
	if _, ok := next.KeyLimit(0, "large"); ok {
		t.Error("large still has a key limit after null")
	}
	if n, _ := next.KeyLimit(0, "bge"); n != 8 {
		t.Errorf("KeyLimit(bge) = %d; want 8", n)
	}
	// The diff as the history shows it (JSON null: a value added or removed).
	want := map[string]string{"key_limits.model.llama-3.1": "[null,4]", "key_limits.model.large": "[1,null]",
		"key_limits.model.bge": "[16,8]"}
	if len(diff) != len(want) {
		t.Errorf("diff %v; want %v", diff, want)
	}
	for k, v := range want {
		if got := configtest.JSON(t, diff[k]); got != v {
			t.Errorf("diff[%s] = %s; want %s", k, got, v)
		}
	}

	// A stored version reads back as saved: the removed value stays
	// removed, not the policy's default again.
	back, err := c.Overlay(next.Doc())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.KeyLimit(0, "large"); ok {
		t.Error("overlaid: the removed large limit came back from the policy")
	}
	if n, _ := back.KeyLimit(0, "llama-3.1"); n != 4 {
		t.Errorf("overlaid: llama-3.1 = %d; want 4", n)
	}
	// A stored version from before the key existed keeps the policy's.
	old := next.Doc()
	delete(old, settings.KeyLimitsKey)
	if back, err = c.Overlay(old); err != nil {
		t.Fatal(err)
	}
	if n, _ := back.KeyLimit(0, "large"); n != 1 {
		t.Errorf("a version without key_limits: large = %d; want the policy's 1", n)
	}
	// As JSON (the staff API's config) too.
	var fromJSON settings.Config = c
	js, _ := jsonenc.Marshal(next)
	if err := fromJSON.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	if _, ok := fromJSON.KeyLimit(0, "large"); ok {
		t.Error("from JSON: the removed large limit came back")
	}
}

func TestKeyLimitsValidation(t *testing.T) {
	c := settings.Default(mustPolicy(t, keyLimitsPolicy), settings.ModeShadow)
	many := map[string]any{}
	for i := range policy.MaxKeyLimits + 1 {
		many[strings.Repeat("m", i+1)] = 1
	}
	for patch, want := range map[string]string{
		`{"key_limits": {"model": {"large": -1}}}`:  `"key_limits.model.large" must be a whole number from 0 to 100000 (null removes it).`,
		`{"key_limits": {"model": {"large": "1"}}}`: `"key_limits.model.large" must be a whole number from 0 to 100000 (null removes it).`,
		`{"key_limits": {"user": {"ann": 1}}}`:      `Unknown setting "key_limits.user": key_limits are for the lanes keyed by a call field: model.`,
		`{"key_limits": {"model": 3}}`:              `"key_limits.model" must be an object.`,
		`{"key_limits": 3}`:                         `"key_limits" must be an object.`,
		`{"key_limits": {"model": {"": 1}}}`:        `"key_limits.model.": a key value is not empty (calls without one count under (none)).`,
		`{"key_limits": {"model": {"a\u0001": 1}}}`: "\"key_limits.model.a\\x01\": a key value has no control characters.",
	} {
		_, _, err := c.Apply(settings.Patch(configtest.Doc(t, patch)))
		var verr *settings.ValidationError
		if !errors.As(err, &verr) || strings.Join(verr.Messages, " ") != want {
			t.Errorf("%s: %v\nwant %s", patch, err, want)
		}
	}
	_, _, err := c.Apply(settings.Patch{"key_limits": map[string]any{"model": many}})
	if err == nil || !strings.Contains(err.Error(), `"key_limits.model" has 67 key values; at most 64.`) {
		t.Errorf("65 key values: %v", err)
	}
	// The built-in policy has no lane keyed by a call field: no key.
	ocl := settings.Default(nil, settings.ModeShadow)
	if _, has := ocl.Doc()[settings.KeyLimitsKey]; has {
		t.Error("the built-in policy's document has key_limits")
	}
	if _, _, err := ocl.Apply(settings.Patch{"key_limits": map[string]any{"user": map[string]any{"a": 1}}}); err == nil ||
		!strings.Contains(err.Error(), `key_limits are for the lanes keyed by a call field: no lane of this policy.`) {
		t.Errorf("OCL key_limits.user: %v", err)
	}
}
