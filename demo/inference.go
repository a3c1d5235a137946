package demo

// The demo under a policy of an OpenAI-compatible inference API (capgate
// demo --policy examples/inference/policy.yaml): its upstream is the
// simulated continuous-batching engine (simapi.Engine), whose knee is in
// tokens — each model's KV cache — and the summary says what it served in
// tokens per second.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/capgate/capgate/loadgen"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

// demoEngineStep is the demo engine's time of a token of a batch of one:
// short, so a call of a thousand tokens takes a second or two.
const demoEngineStep = time.Millisecond

// demoEmbeddings is how long the demo's embeddings calls take.
const demoEmbeddings = 300 * time.Millisecond

// demoInferenceWorkers is how many calls each user of the inference demo
// keeps in flight: enough that, in shadow, the models' caches overflow.
const demoInferenceWorkers = 6

// promptRoom is the cache the demo's engine keeps per seat for a call's
// prompt, beside the max_tokens its seats count.
const promptRoom = 16

// servesCompletions reports whether p's routes are an OpenAI-compatible
// API's: a route of POST /v1/chat/completions or /v1/completions. The demo
// then runs the inference engine upstream.
func servesCompletions(p *policy.Policy) bool {
	return slices.ContainsFunc(p.Routes, isCompletions)
}

// isCompletions reports whether r is POST /v1/chat/completions or
// /v1/completions.
func isCompletions(r *policy.Route) bool {
	return r.Method == "POST" && r.Path.Kind == policy.PathExact &&
		(r.Path.Value == "/v1/chat/completions" || r.Path.Value == "/v1/completions")
}

// demoEngine returns the engine the demo runs under cfg: each model's KV
// cache is what the policy's lane keyed by the model lets run at once, its
// limit in seats (a key value's own, key_limits, else the lane's) times
// the tokens a seat counts (the completions route's seats rule's per) and
// a prompt's room, so that in enforce the gateway keeps each model at its
// knee. Without such a lane, every model has DefaultKVTokens.
func demoEngine(cfg settings.Config) *simapi.Engine {
	e := &simapi.Engine{StepTime: demoEngineStep, KVTokens: map[string]int{}}
	p := cfg.Policy()
	for i, l := range p.Lanes {
		if !l.ByField() || l.Key != "model" || l.Limit.PerTier != nil {
			continue
		}
		per := 0
		for _, r := range p.Routes {
			if s, ok := r.Seats[l.Name]; ok && s.Field != "" && isCompletions(r) {
				per = s.Per
			}
		}
		if per == 0 {
			continue
		}
		e.DefaultKVTokens = cfg.Limit(i, -1) * (per + promptRoom)
		for k, n := range cfg.KeyLimits(i) {
			e.KVTokens[k] = n * (per + promptRoom)
		}
		break
	}
	return e
}

// engineCaches describes e's caches: "small 4224, large 2112 tokens".
func engineCaches(e *simapi.Engine, models []string) string {
	var parts []string
	for _, m := range models {
		kv := e.KVTokens[m]
		if kv == 0 {
			kv = max(e.DefaultKVTokens, 0)
			if kv == 0 {
				kv = simapi.DefaultKVTokens
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d", m, kv))
	}
	return strings.Join(parts, ", ") + " tokens"
}

// engineWindow is what the engine did in one phase of the demo.
type engineWindow struct {
	tokens int64
	span   time.Duration
	models map[string]simapi.EngineModelStats
}

// perSecond returns the phase's tokens a second.
func (w engineWindow) perSecond() float64 {
	if w.span <= 0 {
		return 0
	}
	return float64(w.tokens) / w.span.Seconds()
}

// engineRows are the summary's rows of the engine: what it served in
// tokens per second, and per model the most of its cache held and the
// most calls that waited for it.
func engineRows(row func(string, func(ph demoPhase) string), phases []demoPhase) {
	if len(phases) == 0 || phases[0].engine == nil {
		return
	}
	row("tokens generated, per second", func(ph demoPhase) string {
		return fmt.Sprintf("%d, %.0f/s", ph.engine.tokens, ph.engine.perSecond())
	})
	models := map[string]bool{}
	for _, ph := range phases {
		for m := range ph.engine.models {
			models[m] = true
		}
	}
	for _, m := range slices.Sorted(maps.Keys(models)) {
		row("model "+m+": most cache held / calls waiting for it", func(ph demoPhase) string {
			s := ph.engine.models[m]
			return fmt.Sprintf("%d of %d / %d", s.PeakKV, s.KVTokens, s.PeakQueue)
		})
	}
}

// engineStory is the summary's sentence of a phase of the engine.
func engineStory(ph demoPhase, unit string) string {
	waited := 0
	for _, s := range ph.engine.models {
		waited = max(waited, s.PeakQueue)
	}
	if ph.mode == settings.ModeShadow {
		return fmt.Sprintf("shadow: %d calls found a lane full (%s); all went ahead, the models' caches overflowed (up to %d calls waited in the engine, which thrashed): %.0f tokens a second.",
			sum(ph.t.wouldRef), byScope(ph.t.wouldRef), waited, ph.engine.perSecond())
	}
	return fmt.Sprintf("enforce: the gateway kept each model within its cache (%d calls waited in the engine; %d at the gateway, %d refused and retried, %d %s failed): %.0f tokens a second.",
		waited, len(ph.t.waits), sum(ph.t.refused), ph.rep.Failed(), unit, ph.engine.perSecond())
}

// kneeText describes the demo API's knee: in calls (the OCL API's and a
// generic policy's), or in tokens (the inference engine's caches).
func kneeText(knee *simapi.Knee, eng *simapi.Engine) string {
	if eng == nil {
		past := "slower past it"
		if knee.Thrash > 0 {
			past = "past it the calls share it and it loses throughput"
		}
		return fmt.Sprintf("its knee: %d heavy calls at once; %s, 503 past %d", knee.Capacity, past, knee.FailAt)
	}
	return fmt.Sprintf("a batching engine; its knee: each model's KV cache, %s; past it calls wait and the model thrashes",
		engineCaches(eng, loadgen.DefaultValues("model"))) // the models the users call
}
