package jsonscan

import "testing"

func TestValueEnd(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want string // the value ValueEnd(doc, 0) ends
	}{
		{`"a\"b",1`, `"a\"b"`},
		{`[1,[2,"]"],{}] ,`, `[1,[2,"]"],{}]`},
		{`{"k":"}"}x`, `{"k":"}"}`},
		{`12.5e3}`, `12.5e3`},
		{`true ]`, `true`},
		{``, ``},
	} {
		if got := c.doc[:ValueEnd([]byte(c.doc), 0)]; got != c.want {
			t.Errorf("ValueEnd(%q) ends %q, want %q", c.doc, got, c.want)
		}
	}
}

func TestArrayLen(t *testing.T) {
	for doc, want := range map[string]int{
		`[]`: 0, `[ ]`: 0, `[1]`: 1, `[1, "a,b", [2, 3], {"x": [4, 5]}]`: 4,
		`null`: 0, `{"a": 1}`: 0, `"[1,2]"`: 0,
	} {
		if got := ArrayLen([]byte(doc)); got != want {
			t.Errorf("ArrayLen(%s) = %d, want %d", doc, got, want)
		}
	}
}

// As Python's bool() of the decoded value.
func TestPyTruthy(t *testing.T) {
	for doc, want := range map[string]bool{
		`true`: true, `false`: false, `null`: false, ``: false,
		`""`: false, `"0"`: true, `[]`: false, `[ ]`: false, `[0]`: true, `{}`: false, `{"a":0}`: true,
		`0`: false, `0.0`: false, `-0`: false, `1`: true, `1e-400`: false, `1e400`: true,
	} {
		if got := PyTruthy([]byte(doc)); got != want {
			t.Errorf("PyTruthy(%s) = %v, want %v", doc, got, want)
		}
	}
}
