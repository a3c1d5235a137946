package http

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/policy"
)

func TestMetadataString(t *testing.T) {
	meta := header.ParseEventMetadata(`{"s":"ocl-semantic","n":12.50,"i":-3,"t":true,"f":false,` +
		`"z":null,"o":{"a":"<b>"},"a":[1,"x"],"u":"ééé"}`)
	tests := []struct {
		key  string
		max  int
		want string
	}{
		{"s", 100, "ocl-semantic"},
		{"s", 3, "ocl"},
		{"n", 20, "12.50"},
		{"i", 20, "-3"},
		{"t", 20, "true"},
		{"f", 20, "false"},
		{"z", 20, ""},
		{"missing", 20, ""},
		{"o", 20, `{"a":"<b>"}`},
		{"a", 20, `[1,"x"]`},
		{"u", 2, "éé"},
		{"s", 0, ""},
	}
	for _, tt := range tests {
		if got := metadataString(meta, tt.key, tt.max); got != tt.want {
			t.Errorf("metadataString(%q, %d) = %q, want %q", tt.key, tt.max, got, tt.want)
		}
	}
}

func TestParseQueueMS(t *testing.T) {
	r := time.Unix(1_700_000_000, 0)
	stamp := func(t time.Time) string { return fmt.Sprintf("1-%x-abcdef012345", t.Unix()) }
	root := "Root=" + stamp(r)
	tests := []struct {
		name   string
		header string
		now    time.Time
		want   int64
		wantOK bool
	}{
		{"root", root, r.Add(2500 * time.Millisecond), 2500, true},
		{"self wins", "Root=" + stamp(r.Add(-100*time.Second)) + ";Self=" + stamp(r), r.Add(time.Second), 1000, true},
		{"self first", "Self=" + stamp(r) + ";Root=" + stamp(r.Add(-100*time.Second)), r.Add(time.Second), 1000, true},
		{"small negative clamped", root, r.Add(-time.Second), 0, true},
		{"too negative", root, r.Add(-2 * time.Second), 0, false},
		{"an hour", root, r.Add(time.Hour), 0, false},
		{"just under an hour", root, r.Add(time.Hour - time.Millisecond), 3599999, true},
		{"two hours", root, r.Add(2 * time.Hour), 0, false},
		{"missing", "", r, 0, false},
		{"bad hex", "Root=1-zz-abc", r, 0, false},
		{"no dash", "Root=nope", r, 0, false},
		{"garbage", "garbage", r, 0, false},
		{"empty hex", "Root=1--abc", r, 0, false},
		{"signed hex", "Root=1-+" + fmt.Sprintf("%x", r.Unix()) + "-abc", r, 0, false},
		{"huge hex", "Root=1-ffffffffffffffff-abc", r, 0, false},
		{"spaces", "Root=" + stamp(r.Add(-100*time.Second)) + ";  Self=" + stamp(r) + " ; Parent=53995c3f42cd8ad8", r.Add(time.Second), 1000, true},
		{"other fields only", "Parent=53995c3f42cd8ad8;Sampled=1", r, 0, false},
	}
	for _, tt := range tests {
		got, ok := parseQueueMS(tt.header, tt.now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: parseQueueMS(%q) = %d, %v; want %d, %v", tt.name, tt.header, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzEventMetadata(f *testing.F) {
	for _, s := range []string{``, `{nope`, `[1]`, `null`, `{"capacity_aware":"True","algorithm_id":"x"}`,
		`{"capacity_aware":1.0}`, `{"a":{"b":[1,2]}} `, `{"a":1}{`, `{"automatch_run_id":"ééééééééééééééééééééééé"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hdr string) {
		meta := header.ParseEventMetadata(hdr)
		if meta == nil {
			t.Fatal("ParseEventMetadata returned nil")
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(hdr), &want); err == nil && want != nil && len(meta) != len(want) {
			t.Fatalf("ParseEventMetadata(%q) has %d keys, encoding/json finds %d", hdr, len(meta), len(want))
		}
		header.Aware(meta, policy.OCL().Names.AwareField)
		for key := range meta {
			s := metadataString(meta, key, 20)
			if n := utf8.RuneCountInString(s); n > 20 {
				t.Fatalf("metadataString(%q, 20) has %d characters", key, n)
			}
			if full := metadataString(meta, key, 1<<30); !strings.HasPrefix(full, s) {
				t.Fatalf("metadataString(%q, 20) = %q is not a prefix of %q", key, s, full)
			}
		}
	})
}

func FuzzQueueMS(f *testing.F) {
	r := time.Unix(1_700_000_000, 0)
	root := fmt.Sprintf("Root=1-%x-abcdef012345", r.Unix())
	f.Add(root, int64(2500))
	f.Add(root+"; Self=1-6553f100-x", int64(-1000))
	f.Add("Root=1-zz-abc", int64(0))
	f.Add("Root=nope", int64(0))
	f.Add("garbage", int64(0))
	f.Add("Self=1-ffffffffffffffff-", int64(0))
	f.Add(root, int64(3_600_000))
	f.Fuzz(func(t *testing.T, header string, offsetMS int64) {
		ms, ok := parseQueueMS(header, r.Add(time.Duration(offsetMS)*time.Millisecond))
		if ok && (ms < 0 || ms >= 3_600_000) {
			t.Fatalf("parseQueueMS(%q) = %d, ok; want 0 <= ms < 3600000", header, ms)
		}
		if !ok && ms != 0 {
			t.Fatalf("parseQueueMS(%q) = %d, false; want 0 when not ok", header, ms)
		}
	})
}
