package lanetest

import (
	"context"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/mock"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Env is one gate over a store under test, with a config to change and the
// log lines it wrote.
type Env struct {
	T     testing.TB
	Store Store
	Gate  *capgate.Gate
	Cfg   *settings.Fixed
	Sink  *mock.Sink
}

// NewEnv opens a store and a gate over it on task "task-a", with a fresh
// random key prefix (so runs against a shared Redis don't meet) and the
// default config in shadow mode (per_task 2, the original's), waiting off. Admissions are the test's to release.
func NewEnv(t testing.TB, open Factory) *Env {
	t.Helper()
	s := open(t)
	def := settings.Default(nil, settings.ModeShadow)
	def.Wait.MaxSeconds = 0 // the cases of RunGate refuse at once; RunWait's wait
	// The original's per_task (2, below cluster): the cases check the
	// seed's lanes with the seed's numbers, the task lane binding first.
	if err := def.SetNumber("api_heavy.per_task", 2); err != nil {
		t.Fatal(err)
	}
	cfg := settings.NewFixed(def)
	sink := &mock.Sink{}
	g, err := capgate.NewGate(s, cfg, sink, "task-a")
	if err != nil {
		t.Fatal(err)
	}
	g.KeyPrefix = RandomPrefix()
	return &Env{T: t, Store: s, Gate: g, Cfg: cfg, Sink: sink}
}

// RandomPrefix returns a lane key prefix no other test uses, in the
// cluster key layout ({test:<random>:ocl:capacity}), so the suite runs on a
// Redis Cluster as on a single Redis.
func RandomPrefix() string {
	return "{test:" + randhex.String(6) + ":ocl:capacity}"
}

// Gate returns another gate over the same store, config and sink, on task.
func (e *Env) TaskGate(task string) *capgate.Gate {
	g, err := capgate.NewGate(e.Store, e.Cfg, e.Sink, task)
	if err != nil {
		e.T.Fatal(err)
	}
	g.KeyPrefix = e.Gate.KeyPrefix
	return g
}

// Key returns the key of lane name with id under the env's prefix.
func (e *Env) Key(name capgate.LaneName, id string) string {
	return capgate.Keys{Prefix: e.Gate.KeyPrefix}.Lane(name, id)
}

// Enforce switches the config to enforce for all calls, with no waiting
// (a full lane refuses at once), and applies fn.
func (e *Env) Enforce(fn func(c *settings.Config)) {
	e.Cfg.Edit(func(c *settings.Config) {
		c.Mode, c.EnforceFor = settings.ModeEnforce, settings.EnforceAll
		c.Wait.MaxSeconds = 0
		if fn != nil {
			fn(c)
		}
	})
}

// Admit admits call on the env's gate and releases it at cleanup.
func (e *Env) Admit(call capgate.Call) *capgate.Admission {
	return e.AdmitOn(e.Gate, call)
}

// AdmitOn admits call on g and releases it at cleanup.
func (e *Env) AdmitOn(g *capgate.Gate, call capgate.Call) *capgate.Admission {
	e.T.Helper()
	a := g.Admit(context.Background(), call)
	e.T.Cleanup(func() { a.Release(context.Background()) })
	return a
}

// Match returns a semantic $match of 10 rows by user of tier, under the
// OCL policy.
func Match(user, tier string) capgate.Call { return OCLCall("match", 10, true, false, user, tier) }

// Lexical returns a lexical $match of 10 rows with the reranker, under the
// OCL policy.
func Lexical(user, tier string) capgate.Call { return OCLCall("match", 10, false, true, user, tier) }

// OCLCall returns a call of the OCL policy's route ("match" or "rerank")
// of rows rows by user of tier: what the gateway reads from such a
// request. semantic and reranker are the $match flags; a $rerank has
// neither. It panics for another route, or a flag a route lacks.
func OCLCall(route string, rows int, semantic, reranker bool, user, tier string) capgate.Call {
	r := policy.OCL().Route(route)
	if r == nil {
		panic("lanetest: the OCL policy has no route " + route)
	}
	f := policy.NewFields(r)
	set := func(name string, b bool) {
		if i := r.Field(name); i >= 0 {
			f.SetBool(i, b)
		} else if b {
			panic("lanetest: OCL route " + route + " has no field " + name)
		}
	}
	set("semantic", semantic)
	set("reranker", reranker)
	f.SetInt(r.Field("rows"), rows)
	return capgate.Call{Route: r, Fields: f, UserID: user, Tier: tier}
}

// SetRows sets the rows of an OCL call (see OCLCall).
func SetRows(call *capgate.Call, rows int) {
	call.Fields.SetInt(call.Route.Field("rows"), rows)
}

// LaneCounts returns the admission's counts by lane name.
func LaneCounts(a *capgate.Admission) map[capgate.LaneName]int {
	out := map[capgate.LaneName]int{}
	counts := a.Outcome().Counts
	for i, l := range a.Outcome().Lanes {
		if counts != nil {
			out[l.Name] = counts[i]
		}
	}
	return out
}

// LaneLimits returns the admission's limits by lane name.
func LaneLimits(a *capgate.Admission) map[capgate.LaneName]int {
	out := map[capgate.LaneName]int{}
	for _, l := range a.Outcome().Lanes {
		out[l.Name] = l.Limit
	}
	return out
}
