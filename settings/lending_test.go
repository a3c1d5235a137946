package settings_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/settings"
)

// Lending is an optional key: absent while no lane lends (the built-in
// policy's config is the one it always had), set per lane with a reserve,
// never more than the lane reserves, and gone again at 0.
func TestLending(t *testing.T) {
	c := settings.Default(nil, settings.ModeShadow)
	if _, has := c.Doc()[settings.LendingKey]; has || c.Lend(0) != 0 {
		t.Fatalf("defaults: lending %v, Lend(api_heavy) %d; want none", c.Doc()[settings.LendingKey], c.Lend(0))
	}
	on, diff, err := c.Apply(settings.Patch{"lending": map[string]any{"api_heavy": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if on.Lend(0) != 1 || len(diff) != 1 {
		t.Errorf("on: Lend %d, diff %v; want 1 and one change", on.Lend(0), diff)
	}
	b, err := jsonenc.Marshal(on)
	if err != nil || !strings.HasSuffix(string(b), `,"lending":{"api_heavy":1}}`) {
		t.Errorf("JSON %s, %v; want lending last", b, err)
	}
	back, err := c.Overlay(on.Doc())
	if err != nil || back.Lend(0) != 1 {
		t.Errorf("overlaid: Lend %d, %v; want 1", back.Lend(0), err)
	}
	off, _, err := on.Apply(settings.Patch{"lending": map[string]any{"api_heavy": 0}})
	if err != nil || off.Lend(0) != 0 {
		t.Fatalf("off: Lend %d, %v", off.Lend(0), err)
	}
	if _, has := off.Doc()[settings.LendingKey]; has {
		t.Error("lending 0: the key stays in the document")
	}
	for patch, want := range map[string]string{
		`{"lending": {"api_heavy": 2}}`:                          `"lending.api_heavy" (2) can't be more than "reserve_single_row" (1): a lane lends only the seats it reserves.`,
		`{"lending": {"user": 1}}`:                               `Unknown setting "lending.user": lending is for the lanes with a reserve: api_heavy.`,
		`{"lending": {"api_heavy": -1}}`:                         `"lending.api_heavy" must be a whole number from 0 to 100000.`,
		`{"lending": 3}`:                                         `"lending" must be an object.`,
		`{"lending": {"api_heavy": 1}, "reserve_single_row": 0}`: `"lending.api_heavy" (1) can't be more than "reserve_single_row" (0): a lane lends only the seats it reserves.`,
	} {
		_, _, err := c.Apply(settings.Patch(configtest.Doc(t, patch)))
		var verr *settings.ValidationError
		if !errors.As(err, &verr) || strings.Join(verr.Messages, " ") != want {
			t.Errorf("%s: %v; want %s", patch, err, want)
		}
	}
}
