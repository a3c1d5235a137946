package capgate_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// chargeStore is a memory store that keeps the charges its releases
// were given.
type chargeStore struct {
	*memory.Store
	charges []capgate.Charge
}

// Caps declares the store itself as the waitlist, so the gate's releases
// go through ReleaseWait here.
func (s *chargeStore) Caps() capgate.StoreCaps {
	c := s.Store.Caps()
	c.Waitlist = s
	return c
}

func (s *chargeStore) ReleaseWait(ctx context.Context, prefix, token string, keys []string, c capgate.Charge) error {
	s.charges = append(s.charges, c)
	return s.Store.ReleaseWait(ctx, prefix, token, keys, c)
}

// A call's release charges its user what fairness.by counts: by time its
// seats × the milliseconds it held them, by usage what it reported (its
// time when it reported nothing), by calls nothing (its seats were its
// cost at the join).
func TestReleaseChargesTheCallsWork(t *testing.T) {
	for _, c := range []struct {
		by    settings.FairBy
		usage int64 // -1: none reported
		want  capgate.Charge
	}{
		{settings.FairTime, 2000, capgate.Charge{User: "p", Cost: 1500}},
		{settings.FairUsage, 2000, capgate.Charge{User: "p", Cost: 2000}},
		{settings.FairUsage, -1, capgate.Charge{User: "p", Cost: 1500}},
		{settings.FairCalls, 2000, capgate.Charge{}},
	} {
		synctest.Test(t, func(t *testing.T) {
			cfg := settings.Default(nil, settings.ModeEnforce)
			cfg.EnforceFor = settings.EnforceAll
			cfg.Fairness.By = c.by
			store := &chargeStore{Store: memory.New(nil)}
			gate, err := capgate.NewGate(store, settings.NewFixed(cfg), nil, "task-a")
			if err != nil {
				t.Fatal(err)
			}
			defer gate.Close(context.WithoutCancel(t.Context()))
			adm := gate.Admit(t.Context(), lanetest.Match("p", "preview"))
			mustDecide(t, adm, capgate.DecisionAdmitted)
			time.Sleep(1500 * time.Millisecond) // the fake clock of the bubble
			if c.usage >= 0 {
				adm.SetUsage(c.usage)
			}
			adm.Release(t.Context())
			if len(store.charges) != 1 || store.charges[0] != c.want {
				t.Errorf("fairness.by %s, usage %d: charged %+v, want [%+v]", c.by, c.usage, store.charges, c.want)
			}
		})
	}
}
