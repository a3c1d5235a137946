package jsontree_test

import (
	"encoding/json"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/internal/jsontree"
)

func TestMerge(t *testing.T) {
	base := configtest.Doc(t, `{"a":1,"b":{"c":2,"d":{"e":3}},"f":{"g":1},"h":[1,2]}`)
	change := configtest.Doc(t, `{"b":{"c":5,"d":{"x":9},"y":7},"f":4,"h":{"i":1},"z":{"w":1}}`)
	baseText, changeText := configtest.JSON(t, base), configtest.JSON(t, change)
	tests := []struct {
		knownOnly bool
		want      string
	}{
		{false, `{"a":1,"b":{"c":5,"d":{"e":3,"x":9},"y":7},"f":4,"h":{"i":1},"z":{"w":1}}`},
		// Keys base lacks are dropped at every level; a value that is not
		// an object on both sides is replaced whole.
		{true, `{"a":1,"b":{"c":5,"d":{"e":3}},"f":4,"h":{"i":1}}`},
	}
	for _, tt := range tests {
		got := jsontree.Merge(base, change, tt.knownOnly)
		if configtest.JSON(t, got) != tt.want {
			t.Errorf("Merge(knownOnly=%v)\n got %s\nwant %s", tt.knownOnly, configtest.JSON(t, got), tt.want)
		}
		// The result shares nothing with its inputs.
		got["b"].(map[string]any)["d"].(map[string]any)["e"] = "changed"
		got["h"].(map[string]any)["i"] = "changed"
		if configtest.JSON(t, base) != baseText || configtest.JSON(t, change) != changeText {
			t.Fatalf("Merge modified its inputs: base %s, change %s", configtest.JSON(t, base), configtest.JSON(t, change))
		}
	}
	if got := jsontree.Merge(nil, map[string]any{"a": 1}, true); got == nil || len(got) != 0 {
		t.Errorf("Merge(nil, {a:1}, knownOnly) = %v, want {}", got)
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		old, new any
		want     string
	}{
		{configtest.Doc(t, `{"a":1,"b":{"c":2,"d":3}}`), configtest.Doc(t, `{"a":1,"b":{"c":5,"d":3},"e":6}`), `{"b.c":[2,5],"e":[null,6]}`},
		{nil, configtest.Doc(t, `{"a":1}`), `{"a":[null,1]}`},
		{configtest.Doc(t, `{"a":{"b":1}}`), nil, `{"a":[{"b":1},null]}`},
		{configtest.Doc(t, `{"a":{"b":1},"c":[1]}`), configtest.Doc(t, `{"a":5,"c":[1]}`), `{"a":[{"b":1},5]}`},
		{configtest.Doc(t, `{"a":[1,{"b":2}]}`), configtest.Doc(t, `{"a":[1,{"b":3}]}`), `{"a":[[1,{"b":2}],[1,{"b":3}]]}`},
		{configtest.Doc(t, `{"a":{"b":{"c":1}}}`), configtest.Doc(t, `{"a":{"b":{"c":"1"}}}`), `{"a.b.c":[1,"1"]}`},
		{configtest.Doc(t, `{"a":1,"b":true}`), map[string]any{"a": 1.0, "b": 1}, `{"b":[true,1]}`},
		{configtest.Doc(t, `{"a":3}`), map[string]any{"a": 3}, `{}`},
		{configtest.Doc(t, `{"a":1e2}`), configtest.Doc(t, `{"a":100}`), `{}`},
		{configtest.Doc(t, `{"a":{"b":[1,"x",null]}}`), configtest.Doc(t, `{"a":{"b":[1,"x",null]}}`), `{}`},
	}
	for _, tt := range tests {
		got := jsontree.Diff(tt.old, tt.new)
		if got == nil || configtest.JSON(t, got) != tt.want {
			t.Errorf("Diff(%s, %s) = %s, want %s", configtest.JSON(t, tt.old), configtest.JSON(t, tt.new), configtest.JSON(t, got), tt.want)
		}
	}
}

func TestParseAssignments(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tiers.preview=1", "mode=enforce"}, `{"mode":"enforce","tiers":{"preview":1}}`},
		{[]string{"tiers.preview=1", "tiers.core=-2", "tiers.staff=007", "es2_knn=-0"},
			`{"es2_knn":0,"tiers":{"core":-2,"preview":1,"staff":7}}`},
		{[]string{"a.b.c=x=y", "a.b.d=", "e=1.5", "f=-", "g=1e2", "h= 1"},
			`{"a":{"b":{"c":"x=y","d":""}},"e":"1.5","f":"-","g":"1e2","h":" 1"}`},
		{[]string{"tiers=1", "tiers.preview=2"}, `{"tiers":{"preview":2}}`},
		{[]string{"n=99999999999999999999999"}, `{"n":99999999999999999999999}`},
		{[]string{"key_limits.model.large=null", "s=Null"}, `{"key_limits":{"model":{"large":null}},"s":"Null"}`},
	}
	for _, tt := range tests {
		got, err := jsontree.ParseAssignments(tt.args)
		if err != nil || configtest.JSON(t, got) != tt.want {
			t.Errorf("ParseAssignments(%q) = %s, %v; want %s", tt.args, configtest.JSON(t, got), err, tt.want)
		}
	}
	if n, _ := jsontree.ParseAssignments([]string{"es2_knn=2"}); n["es2_knn"] != json.Number("2") {
		t.Errorf(`ParseAssignments(es2_knn=2) = %#v, want json.Number("2")`, n["es2_knn"])
	}

	errTests := []struct {
		args []string
		want string
	}{
		{nil, `Give at least one <setting>=<value>.`},
		{[]string{"mode"}, `Expected <setting>=<value>, got "mode".`},
		{[]string{"=1"}, `Expected <setting>=<value>, got "=1".`},
		{[]string{"mode=off", "tiers..preview=1"}, `Expected <setting>=<value>, got "tiers..preview=1".`},
		{[]string{"tiers.=1"}, `Expected <setting>=<value>, got "tiers.=1".`},
	}
	for _, tt := range errTests {
		got, err := jsontree.ParseAssignments(tt.args)
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseAssignments(%q) = %v, %v; want error %s", tt.args, got, err, tt.want)
		}
	}
}

// mutateAll adds a key to every object of a tree and overwrites every
// array element, to show the tree shares nothing with another.
func mutateAll(v any) {
	switch t := v.(type) {
	case map[string]any:
		for _, x := range t {
			mutateAll(x)
		}
		t["\x00mutated"] = true
	case []any:
		for i, x := range t {
			mutateAll(x)
			t[i] = "mutated"
		}
	}
}

// keysWithin reports whether got's keys are all in base's, recursing where
// both hold an object.
func keysWithin(got, base map[string]any) bool {
	for k, gv := range got {
		bv, ok := base[k]
		if !ok {
			return false
		}
		gm, gObj := gv.(map[string]any)
		bm, bObj := bv.(map[string]any)
		if gObj && bObj && !keysWithin(gm, bm) {
			return false
		}
	}
	return true
}

func FuzzMerge(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":2,"d":{"e":3}}}`), []byte(`{"b":{"c":5,"d":{"x":9}},"z":1}`), true)
	f.Add([]byte(`{"a":1,"b":{"c":2}}`), []byte(`{"b":5,"a":{"x":[1,{"y":2}]}}`), false)
	f.Add([]byte(`{"a":[1,2]}`), []byte(`{"a":{"b":null}}`), true)
	f.Add([]byte(`{}`), []byte(`{"a":{}}`), false)
	f.Fuzz(func(t *testing.T, baseJSON, changeJSON []byte, knownOnly bool) {
		bv, err1 := jsontree.Parse(baseJSON)
		cv, err2 := jsontree.Parse(changeJSON)
		base, ok1 := bv.(map[string]any)
		change, ok2 := cv.(map[string]any)
		if err1 != nil || err2 != nil || !ok1 || !ok2 {
			return
		}
		baseText, changeText := configtest.JSON(t, base), configtest.JSON(t, change)
		got := jsontree.Merge(base, change, knownOnly)
		if knownOnly && !keysWithin(got, base) {
			t.Fatalf("Merge(%s, %s, knownOnly) = %s has keys base lacks", baseText, changeText, configtest.JSON(t, got))
		}
		for k := range change {
			if _, ok := got[k]; !ok && !knownOnly {
				t.Fatalf("Merge(%s, %s) = %s lacks %q", baseText, changeText, configtest.JSON(t, got), k)
			}
		}
		if d := jsontree.Diff(got, jsontree.Merge(got, change, knownOnly)); len(d) > 0 {
			t.Fatalf("merging %s twice changed %v", changeText, d)
		}
		if d := jsontree.Diff(got, got); len(d) > 0 {
			t.Fatalf("Diff(x, x) = %v", d)
		}
		mutateAll(got)
		if configtest.JSON(t, base) != baseText || configtest.JSON(t, change) != changeText {
			t.Fatalf("Merge shares or modified its inputs: base %s -> %s, change %s -> %s",
				baseText, configtest.JSON(t, base), changeText, configtest.JSON(t, change))
		}
	})
}

func TestParse(t *testing.T) {
	v, err := jsontree.Parse([]byte(` {"a": 3, "b": [1.5]} `))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := v.(map[string]any)["a"].(json.Number); !ok || n != "3" {
		t.Errorf(`ParseDoc: "a" = %#v, want json.Number("3")`, v.(map[string]any)["a"])
	}
	for _, bad := range []string{``, `{`, `{} {}`, `{}]`, `1 2`, `{"a":1}x`} {
		if v, err := jsontree.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, v)
		}
	}
}
