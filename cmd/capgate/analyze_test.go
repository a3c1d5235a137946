package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/genlog"
)

// genLog writes a generated log of the real gate to a file in dir.
func genLog(t *testing.T, dir, name string, opts genlog.Options) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := genlog.Generate(context.Background(), f, opts); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCLI(t *testing.T, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	code = Run(context.Background(), args, stdin, &out, &errb)
	return code, out.String(), errb.String()
}

func TestAnalyzeCLIText(t *testing.T) {
	dir := t.TempDir()
	log := genLog(t, dir, "gw.log", genlog.Options{Calls: 3000, Rate: 2, Tasks: 2, NoiseEvery: 100, Seed: 9})
	code, out, errs := runCLI(t, nil, "analyze", log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"capgate analyze: 3000 ocl_capacity lines", "Lines: 3030 read, 30 skipped",
		"Calls by decision", "Peak calls in flight per lane", "Shadow refusals:", "held_ms", "queue_ms",
		"Unavailable: 0 calls", "Reconstruction check:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "What if") {
		t.Error("what-if section without --what-if")
	}
}

func TestAnalyzeCLIJSONWhatIfAndStdin(t *testing.T) {
	dir := t.TempDir()
	log := genLog(t, dir, "gw.log", genlog.Options{Calls: 3000, Rate: 2, Tasks: 2, Seed: 4})
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// Flags after the file; the assignments run up to the next flag; "-"
	// reads stdin.
	code, out, errs := runCLI(t, bytes.NewReader(data), "analyze", "-", "--what-if", "mode=enforce", "enforce_for=all",
		"api_heavy.cluster=2", "--json", "--top", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Inputs []struct{ Name string }
		Calls  struct{ Total int64 }
		Users  struct{ Top []json.RawMessage }
		WhatIf struct {
			Changes          map[string][2]any `json:"changes"`
			Refused          int64             `json:"refused"`
			ExtraWaitSeconds int64             `json:"extra_wait_seconds"`
			Agreement        struct{ Compared int64 }
		} `json:"what_if"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(r.Inputs) != 1 || r.Inputs[0].Name != "stdin" || r.Calls.Total != 3000 || len(r.Users.Top) != 3 {
		t.Errorf("report = %+v", r)
	}
	if len(r.WhatIf.Changes) != 3 || r.WhatIf.Refused == 0 || r.WhatIf.ExtraWaitSeconds < 5*r.WhatIf.Refused ||
		r.WhatIf.Agreement.Compared != 3000 {
		t.Errorf("what-if = %+v, want 3 changes (mode, enforce_for, cluster), refusals with ≥ 5 s each", r.WhatIf)
	}
}

func TestAnalyzeCLIErrors(t *testing.T) {
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "cfg.json")
	if err := os.WriteFile(badCfg, []byte(`{"config": {"tiers": {"preview": -1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"analyze", "--what-if", "tiers.preview=x"}, 2, `"tiers.preview" must be a whole number from 0 to 100000.`},
		{[]string{"analyze", "--what-if"}, 2, "Give at least one <setting>=<value>."},
		{[]string{"analyze", "--what-if", "mode=enforce", "--what-if=enforce_for=some"}, 2, `"enforce_for" must be one of aware, all.`},
		{[]string{"analyze", "--frobnicate"}, 2, "unknown flag --frobnicate"},
		{[]string{"analyze", "--top", "0"}, 2, "--top must be a whole number of at least 1"},
		{[]string{"analyze", "--html"}, 2, "--html needs a value"},
		{[]string{"analyze", "-", "-"}, 2, `"-" (stdin) given more than once`},
		{[]string{"analyze", "--config", badCfg}, 2, `"tiers.preview" must be a whole number`},
		{[]string{"analyze", filepath.Join(dir, "missing.log")}, 1, "no such file or directory"},
	} {
		code, _, errs := runCLI(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.msg) {
			t.Errorf("%q: exit %d, %q; want %d, %q", tt.args, code, errs, tt.code, tt.msg)
		}
	}
	code, out, _ := runCLI(t, nil, "analyze", "-h")
	if code != 0 || !strings.Contains(out, "Usage: capgate analyze") {
		t.Errorf("-h: exit %d, %q", code, out)
	}
}

func TestAnalyzeCLIConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := settings.Default(nil, settings.ModeShadow)
	if err := cfg.SetNumber("api_heavy.cluster", 8); err != nil {
		t.Fatal(err)
	}
	log := genLog(t, dir, "gw.log", genlog.Options{Calls: 2000, Rate: 3, Seed: 2, Config: &cfg})
	show, err := json.Marshal(map[string]any{"version": 3, "config": cfg.Doc()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "show.json")
	if err := os.WriteFile(path, show, 0o600); err != nil {
		t.Fatal(err)
	}
	// The base from --config is the config in force: "no change" replays
	// the log as it was.
	code, out, errs := runCLI(t, nil, "analyze", "--config", path, "--json", log, "--what-if", "mode=shadow")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		WhatIf struct {
			Changes   map[string]any
			Agreement struct{ Rate float64 }
		} `json:"what_if"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.WhatIf.Changes) != 0 || r.WhatIf.Agreement.Rate < 0.99 {
		t.Errorf("what-if against the config in force: changes %v, agreement %v; want none, ≥ 0.99", r.WhatIf.Changes, r.WhatIf.Agreement.Rate)
	}
}

func TestAnalyzeCLIHTML(t *testing.T) {
	dir := t.TempDir()
	log := genLog(t, dir, "gw.log", genlog.Options{Calls: 3000, Rate: 2, Tasks: 2, Seed: 8,
		Outages: []genlog.Outage{{At: 300e9, For: 10e9}}})
	page := filepath.Join(dir, "report.html")
	code, out, errs := runCLI(t, nil, "analyze", log, "--html", page, "--what-if", "mode=enforce", "enforce_for=all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "HTML report written to "+page) {
		t.Errorf("stdout does not name the page:\n%s", out)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	// The page parses as HTML (tags balanced) and each chart as strict XML.
	d := xml.NewDecoder(strings.NewReader(html))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("page does not parse: %v", err)
		}
		switch tok.(type) {
		case xml.StartElement:
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Errorf("unbalanced tags: depth %d at the end", depth)
	}
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(html, -1)
	if len(svgs) < 4 { // api_heavy, es2_knn, tiers, tasks, refusals
		t.Fatalf("%d charts, want at least 4", len(svgs))
	}
	for _, svg := range svgs {
		var v struct {
			Title string `xml:"title"`
			Desc  string `xml:"desc"`
			Role  string `xml:"role,attr"`
			Lines []struct {
				Class  string `xml:"class,attr"`
				Points string `xml:"points,attr"`
			} `xml:"polyline"`
		}
		if err := xml.Unmarshal([]byte(svg), &v); err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%.300s", err, svg)
		}
		if v.Role != "img" || v.Title == "" || v.Desc == "" || len(v.Lines) == 0 || v.Lines[0].Points == "" {
			t.Errorf("chart lacks role, title, text alternative or data: %+v", v)
		}
	}
	for _, want := range []string{`<title>capgate analyze`, `lang="en"`, `Calls in flight: api_heavy`, `class="limit"`,
		`Refusals over time`, `class="whatif"`, `Lane store unavailability windows`, `an estimate`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Readable offline: nothing is fetched.
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(html); m != "" {
		t.Errorf("page refers to an external asset: %s", m)
	}
	if strings.Contains(html, "<script") {
		t.Error("page has a script")
	}
}
