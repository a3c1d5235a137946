package simapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is a simulated continuous-batching inference server (the model
// of vLLM and TGI), per model, for Inference's completions:
//
//   - The calls running on a model form its batch, which advances a token
//     of each call per step. A step takes StepTime × (1 + batch/BatchKnee):
//     one call alone gets a token every StepTime; each call slows as the
//     batch grows, while the model's tokens per second grow with it,
//     towards BatchKnee / StepTime.
//   - Each running call holds its KV cache, prompt + max_tokens tokens,
//     until it ends; a model has KVTokens of cache (its knee, in tokens).
//     A call that finds no room waits in the model's queue, first come
//     first served, for calls to end.
//   - While calls wait, the model thrashes (preemption and recompute, cache
//     swapped out and in): every step takes longer by
//     SwapCost × waiting / batch. So past its KV budget a model serves
//     fewer tokens per second, not only later ones: the overload a limiter
//     in front of it should keep it from.
//
// A call whose connection closes stops at once and frees its cache (vLLM
// aborts a request whose client went). Set the fields before use; safe for
// concurrent use.
type Engine struct {
	// StepTime is one token of a batch of one. Default 2 ms.
	StepTime time.Duration
	// BatchKnee is the batch at which a step takes twice StepTime.
	// Default 8.
	BatchKnee int
	// KVTokens is each model's KV cache in tokens; a model not in it has
	// DefaultKVTokens.
	KVTokens map[string]int
	// DefaultKVTokens is the KV cache of a model KVTokens lacks. Default
	// 4096.
	DefaultKVTokens int
	// SwapCost is what the calls waiting for cache cost every step, per
	// call waiting per call running. Default 1.
	SwapCost float64
	// ChunkTokens is how many tokens a call produces between two looks at
	// its batch (and, streamed, in one event). Default 4.
	ChunkTokens int

	tokens atomic.Int64 // generated, all models

	mu     sync.Mutex
	models map[string]*engineModel // requires mu held
}

// The Engine's defaults.
const (
	DefaultStepTime    = 2 * time.Millisecond
	DefaultBatchKnee   = 8
	DefaultKVTokens    = 4096
	DefaultSwapCost    = 1.0
	DefaultChunkTokens = 4
)

// engineModel is one model's batch and queue; its fields require the
// Engine's mu held.
type engineModel struct {
	kv        int // the cache, tokens
	used      int // held by the calls running
	running   int
	queue     []*engineWaiter
	peakUsed  int
	peakQueue int
}

type engineWaiter struct {
	need  int
	ready chan struct{} // closed once admitted (need added to used)
}

// EngineModelStats is what a model of an Engine did.
type EngineModelStats struct {
	KVTokens  int `json:"kv_tokens"`  // its cache
	PeakKV    int `json:"peak_kv"`    // the most of it held at once
	PeakQueue int `json:"peak_queue"` // the most calls waiting for room at once
	Running   int `json:"running"`    // calls running now
	Queued    int `json:"queued"`     // calls waiting now
}

// Tokens returns the tokens generated so far, all models.
func (e *Engine) Tokens() int64 { return e.tokens.Load() }

// Models returns what each model did so far.
func (e *Engine) Models() map[string]EngineModelStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]EngineModelStats, len(e.models))
	for name, m := range e.models {
		out[name] = EngineModelStats{KVTokens: m.kv, PeakKV: m.peakUsed, PeakQueue: m.peakQueue, Running: m.running, Queued: len(m.queue)}
	}
	return out
}

// ResetPeaks starts the models' peaks (EngineModelStats.PeakKV and
// PeakQueue) over from what they hold now, for a new window.
func (e *Engine) ResetPeaks() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.models {
		m.peakUsed, m.peakQueue = m.used, len(m.queue)
	}
}

// model returns the state of model name, made now. Requires e.mu held.
func (e *Engine) model(name string) *engineModel {
	if e.models == nil {
		e.models = map[string]*engineModel{}
	}
	m := e.models[name]
	if m == nil {
		kv := e.KVTokens[name]
		if kv <= 0 {
			kv = or(e.DefaultKVTokens, DefaultKVTokens)
		}
		m = &engineModel{kv: kv}
		e.models[name] = m
	}
	return m
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Generate runs a call of model with prompt tokens of prompt that asks
// for maxTokens: it waits for cache, then produces the tokens, calling
// emit with each chunk's count as it is made (emit returning false stops
// the call: its client is gone). It returns the tokens produced, and
// ctx's error if ctx ended first.
func (e *Engine) Generate(ctx context.Context, model string, prompt, maxTokens int, emit func(n int) bool) (int, error) {
	e.mu.Lock()
	m := e.model(model)
	need := min(max(prompt+maxTokens, 1), m.kv) // a call bigger than the cache runs alone
	w := &engineWaiter{need: need, ready: make(chan struct{})}
	if len(m.queue) == 0 && m.used+need <= m.kv {
		m.admit(w)
	} else {
		m.queue = append(m.queue, w)
		m.peakQueue = max(m.peakQueue, len(m.queue))
	}
	e.mu.Unlock()
	select {
	case <-w.ready:
	case <-ctx.Done():
		e.mu.Lock()
		select {
		case <-w.ready: // admitted meanwhile: give the cache back
			e.mu.Unlock()
			e.leave(m, need)
		default:
			m.remove(w)
			e.mu.Unlock()
		}
		return 0, ctx.Err()
	}
	defer e.leave(m, need)
	step := or(int(e.StepTime), int(DefaultStepTime))
	knee := or(e.BatchKnee, DefaultBatchKnee)
	chunk := or(e.ChunkTokens, DefaultChunkTokens)
	swap := e.SwapCost
	if swap == 0 {
		swap = DefaultSwapCost
	}
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	done := 0
	for done < maxTokens {
		e.mu.Lock()
		batch, waiting := max(m.running, 1), len(m.queue)
		e.mu.Unlock()
		n := min(chunk, maxTokens-done)
		per := float64(step) * (1 + float64(batch)/float64(knee)) * (1 + swap*float64(waiting)/float64(batch))
		t.Reset(time.Duration(per * float64(n)))
		select {
		case <-t.C:
		case <-ctx.Done():
			return done, ctx.Err()
		}
		done += n
		e.tokens.Add(int64(n))
		if !emit(n) {
			return done, context.Canceled
		}
	}
	return done, nil
}

// admit starts w. Requires the Engine's mu held.
func (m *engineModel) admit(w *engineWaiter) {
	m.used += w.need
	m.running++
	m.peakUsed = max(m.peakUsed, m.used)
	close(w.ready)
}

// remove takes w off the queue. Requires the Engine's mu held.
func (m *engineModel) remove(w *engineWaiter) {
	for i, q := range m.queue {
		if q == w {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			return
		}
	}
}

// leave ends a call of m that held need tokens, and starts the calls at
// the head of the queue that now fit, in order.
func (e *Engine) leave(m *engineModel, need int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m.used -= need
	m.running--
	for len(m.queue) > 0 && m.used+m.queue[0].need <= m.kv {
		w := m.queue[0]
		m.queue = m.queue[1:]
		m.admit(w)
	}
}
