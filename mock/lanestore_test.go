package mock_test

import (
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/redis"
)

// A LaneStore forwards the whole set its Base declares (no part hidden,
// none added), CapsFn replaces it, and without a Base it declares none.
func TestLaneStoreForwardsCaps(t *testing.T) {
	rs, err := redis.Open(redis.Options{Cluster: []string{"127.0.0.1:1"}}) // every part set; Open does not connect
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for _, base := range []capgate.LaneStore{memory.New(nil), rs} {
		if got, want := (&mock.LaneStore{Base: base}).Caps(), base.Caps(); got != want {
			t.Errorf("mock.LaneStore{%T}.Caps() = %+v, want Base's %+v", base, got, want)
		}
	}
	own := capgate.StoreCaps{Kind: "test"}
	if got := (&mock.LaneStore{Base: rs, CapsFn: func() capgate.StoreCaps { return own }}).Caps(); got != own {
		t.Errorf("with CapsFn: Caps() = %+v, want CapsFn's %+v", got, own)
	}
	if got := (&mock.LaneStore{}).Caps(); got != (capgate.StoreCaps{}) {
		t.Errorf("without a Base: Caps() = %+v, want none", got)
	}
}
