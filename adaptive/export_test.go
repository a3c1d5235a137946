package adaptive

import (
	"context"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/settings"
)

// Key returns the store key of the adaptive state of g's lane name, under
// the policy of g's config (OCL's without a config source).
func Key(g *capgate.Gate, name capgate.LaneName) string {
	cfg := settings.Default(nil, settings.ModeShadow)
	if g.Source != nil {
		cfg = g.Source.Config(context.Background())
	}
	for _, ln := range lanesOf(cfg) {
		if ln.name == name {
			return (&Runner{Gate: g}).key(cfg, ln)
		}
	}
	panic("Key: " + string(name) + " can't be adaptive")
}
