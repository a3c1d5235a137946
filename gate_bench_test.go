package capgate_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
	"github.com/capgate/capgate/lanetest"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// discardSink takes every line and counts the bytes, as a sink that keeps
// up would.
type discardSink struct{ n atomic.Int64 }

func (d *discardSink) Emit(line []byte) error { d.n.Add(int64(len(line))); return nil }

// benchCall is a semantic $match of 25 rows: five lanes.
func benchCall(user string) capgate.Call {
	c := lanetest.OCLCall("match", 25, true, false, user, "core")
	c.CID = "0123456789abcdef0123456789abcdef"
	return c
}

func benchGate(tb testing.TB) *capgate.Gate {
	tb.Helper()
	cfg := settings.Default(nil, settings.ModeShadow)
	g, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), &discardSink{}, "task-a")
	if err != nil {
		tb.Fatal(err)
	}
	g.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return g
}

// benchAdmitRelease admits and releases one user's call on g, which must
// admit it.
func benchAdmitRelease(b *testing.B, g *capgate.Gate) {
	ctx := context.Background()
	call := benchCall("alice")
	b.ReportAllocs()
	for b.Loop() {
		a := g.Admit(ctx, call)
		if a.Outcome().Decision != capgate.DecisionAdmitted {
			b.Fatalf("decision %q, want admitted", a.Outcome().Decision)
		}
		a.Release(ctx)
	}
}

// BenchmarkGateAdmitRelease is the whole decision path of one gated call on
// the in-process store: config, lane plan, token, acquire, decision,
// handing the call to the renewer and back, release, log line.
func BenchmarkGateAdmitRelease(b *testing.B) {
	g := benchGate(b)
	benchAdmitRelease(b, g)
}

// BenchmarkGateAdmitReleaseLocalLanes is BenchmarkGateAdmitRelease with
// local lanes on the gate (Gate.Local): each call takes and gives back a
// lease in them too.
func BenchmarkGateAdmitReleaseLocalLanes(b *testing.B) {
	g := benchGate(b)
	g.Local = memory.New(nil)
	benchAdmitRelease(b, g)
}

// BenchmarkGateAdmitReleaseEnforceWait is BenchmarkGateAdmitRelease in
// enforce with waiting on (the default wait), uncontended: the join's fast
// path and the release through the waitlist.
func BenchmarkGateAdmitReleaseEnforceWait(b *testing.B) {
	g := benchGate(b)
	cfg := settings.Default(nil, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	g.Source = settings.NewFixed(cfg)
	benchAdmitRelease(b, g)
}

// BenchmarkGateAdmitReleaseParallel is the same with every goroutine its
// own user, sharing the cluster, task, es2_knn and tier lanes. In shadow
// mode the shared lanes are over their limits, so most calls are
// shadow-refused and compute a Retry-After, as they would under load.
func BenchmarkGateAdmitReleaseParallel(b *testing.B) {
	g := benchGate(b)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		call := benchCall("u" + strconv.FormatInt(n.Add(1), 10))
		for pb.Next() {
			g.Admit(ctx, call).Release(ctx)
		}
	})
}

// BenchmarkKeysPlan is the lane plan of a semantic $match: "new" into a
// fresh slice of 5, "append" into a reused buffer.
func BenchmarkKeysPlan(b *testing.B) {
	k := capgate.Keys{Prefix: "ocl:capacity", TaskID: "task-a"}
	cfg := settings.Default(nil, settings.ModeShadow)
	call := benchCall("alice")
	tier := cfg.Policy().TierIndex(call.Tier)
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(k.AppendPlan(make([]capgate.Lane, 0, 5), cfg, &call, tier)) != 5 {
				b.Fatal("want 5 lanes")
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		buf := make([]capgate.Lane, 0, 5)
		b.ReportAllocs()
		for b.Loop() {
			buf = k.AppendPlan(buf[:0], cfg, &call, tier)
		}
	})
}

// BenchmarkAdmissionSetHeaders writes the capacity headers of an admitted
// call into a header map that already holds the upstream's headers.
func BenchmarkAdmissionSetHeaders(b *testing.B) {
	g := benchGate(b)
	ctx := context.Background()
	a := g.Admit(ctx, benchCall("alice"))
	defer a.Release(ctx)
	h := http.Header{"Content-Type": {"application/json"}, "Vary": {"Origin"}}
	b.ReportAllocs()
	for b.Loop() {
		answer.SetHeaders(h, a.Outcome())
	}
}

// BenchmarkAdmissionLogLine builds a released call's log record and
// encodes it, as Release does (BenchmarkRecordAppendJSON times the
// encoding alone).
func BenchmarkAdmissionLogLine(b *testing.B) {
	g := benchGate(b)
	ctx := context.Background()
	a := g.Admit(ctx, benchCall("alice"))
	a.Release(ctx)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = a.AppendLine(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}
