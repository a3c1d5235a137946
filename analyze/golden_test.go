package analyze_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/genlog"
)

// The OCL outputs are pinned to those of the code before the policy was
// data (commit 50aa08f, where analyze and genlog knew OCL's lanes by
// heart): the files in testdata/ocl and the hashes below were made by it.
// Reading through the OCL policy must change no byte of a log or a report.

var update = flag.Bool("analyze.update", false, "rewrite testdata/ocl from the current code (only for a change meant to alter the OCL output)")

// generated is the HTML page's one line that changes from run to run.
var generated = regexp.MustCompile(`Generated [^ ]+\. `)

// reports analyzes log (an input named "in") and returns the report as
// text, JSON and HTML (its time of writing blanked).
func reports(t *testing.T, log []byte, opts analyze.Options) map[string][]byte {
	t.Helper()
	r, err := analyze.Analyze(t.Context(), []analyze.Input{{Name: "in", R: bytes.NewReader(log)}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	var txt, js, page bytes.Buffer
	if err := analyze.WriteText(&txt, r); err != nil {
		t.Fatal(err)
	}
	if err := analyze.WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	if err := analyze.WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"txt": txt.Bytes(), "json": js.Bytes(),
		"html": generated.ReplaceAll(page.Bytes(), []byte("Generated X. "))}
}

// TestOCLGoldenLines analyzes hand-made lines (single-row and semantic
// calls, an unknown tier, a refused and an unavailable call) with a
// what-if that uses the reserve.
func TestOCLGoldenLines(t *testing.T) {
	log, err := os.ReadFile("testdata/ocl/lines.log")
	if err != nil {
		t.Fatal(err)
	}
	base := settings.Default(policy.OCL(), settings.ModeShadow)
	cfg, _, err := analyze.WhatIfConfig(base, []string{"mode=enforce", "enforce_for=all", "api_heavy.cluster=2", "reserve_single_row=1"})
	if err != nil {
		t.Fatal(err)
	}
	for ext, got := range reports(t, log, analyze.Options{WhatIf: &cfg}) {
		path := "testdata/ocl/lines.whatif." + ext
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s:\n%s", ext, path, firstDiff(string(got), string(want)))
		}
	}
}

// TestOCLGoldenGenerated pins a generated OCL log with a store outage,
// and its reports with a what-if, by their SHA-256.
func TestOCLGoldenGenerated(t *testing.T) {
	log, _ := generate(t, genlog.Options{Calls: 3000, Rate: 2, Tasks: 2, Seed: 8,
		Outages: []genlog.Outage{{At: 300 * time.Second, For: 10 * time.Second}}})
	want := map[string]string{
		"log":  "0706386c06548f6aa55600112639c2b8fd24bbb13f1144dbf5605d210eee14bd",
		"txt":  "a0ac82c99edac9ed50d83a6403659a9631cd0871c2014bc4a21184065ebaaebb",
		"json": "3090810031f4449292ea0fb0921c633f32b1621882bd419303b9ad11b3f8deee",
		"html": "a5e3705e6f8c22c8edade70e7c3f72074f9f74340b2693484737b9b7e5f0c9c9",
	}
	cfg, _, err := analyze.WhatIfConfig(settings.Default(nil, settings.ModeShadow), []string{"mode=enforce", "enforce_for=all"})
	if err != nil {
		t.Fatal(err)
	}
	got := reports(t, log, analyze.Options{WhatIf: &cfg})
	got["log"] = log
	for k, w := range want {
		sum := sha256.Sum256(got[k])
		if h := hex.EncodeToString(sum[:]); h != w {
			t.Errorf("%s: sha256 %s, want %s", k, h, w)
		}
	}
}

// firstDiff shows where two texts part.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, gl, wl)
		}
	}
	return "(same lines)"
}
