package configtest

import (
	"reflect"
	"testing"

	"github.com/capgate/capgate/settings"
)

// Same reports whether a and b are the same config. A settings.Config is
// not comparable with == (its lane numbers are a slice, its adaptive
// settings a map).
func Same(a, b settings.Config) bool { return reflect.DeepEqual(a, b) }

// Exported returns c with its exported fields only: every setting that is
// not a lane's number (Numbers has those).
func Exported(c settings.Config) settings.Config {
	var out settings.Config
	src, dst := reflect.ValueOf(c), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		if src.Type().Field(i).IsExported() {
			dst.Field(i).Set(src.Field(i))
		}
	}
	return out
}

// Numbers returns c's lane numbers by config key ("api_heavy.cluster",
// "tiers.preview", ...).
func Numbers(c settings.Config) map[string]int {
	out := map[string]int{}
	for _, k := range c.Keys() {
		out[k], _ = c.Number(k)
	}
	return out
}

// Number returns c's lane number at key, failing tb for a key c's policy
// does not have.
func Number(tb testing.TB, c settings.Config, key string) int {
	tb.Helper()
	n, ok := c.Number(key)
	if !ok {
		tb.Fatalf("%q is no lane number of policy %s", key, c.Policy().Name)
	}
	return n
}

// SetNumbers sets c's lane numbers from kv, pairs of a config key and its
// number ("tiers.preview", 1, ...), failing tb for a key c's policy does
// not have.
func SetNumbers(tb testing.TB, c *settings.Config, kv ...any) {
	tb.Helper()
	if len(kv)%2 != 0 {
		tb.Fatalf("SetNumbers: %d arguments, want key and number pairs", len(kv))
	}
	for i := 0; i < len(kv); i += 2 {
		key, ok1 := kv[i].(string)
		n, ok2 := kv[i+1].(int)
		if !ok1 || !ok2 {
			tb.Fatalf("SetNumbers: %#v, %#v is no key and number", kv[i], kv[i+1])
		}
		if err := c.SetNumber(key, n); err != nil {
			tb.Fatal(err)
		}
	}
}
