package simapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Inference is a fake OpenAI-compatible inference API, for the inference
// policy's example (examples/inference), its end-to-end tests and the
// demo: POST /v1/chat/completions and /v1/completions answer in OpenAI's
// shapes (a completion with its usage, or with "stream": true server-sent
// chunks, the usage in a last chunk when stream_options.include_usage is
// set, then [DONE]); POST /v1/embeddings answers a vector per text; GET
// /v1/models lists Models. It records how many calls ran at once — in all,
// per model and per caller (by bearer token) — so a test can check that a
// gateway in front of it kept every limit. GET StatsPath serves them as
// JSON. Set its fields before serving; safe for concurrent use.
//
// How long a completion takes: with Engine set, the Engine's model of a
// continuous-batching server (per-token time growing with the batch, a KV
// cache in tokens past which calls queue and the model thrashes); else
// Latency, the tokens all at the end. Embeddings always take Latency.
type Inference struct {
	Models []string // what GET /v1/models lists; default "small", "large"
	// Latency is how long a call takes without an Engine, and an
	// embeddings call. Default 2 s.
	Latency time.Duration
	// Engine, when set, runs the completions (see Engine).
	Engine *Engine
	// Hold, when set, is received from before a call answers (tests hold
	// calls in flight with it); Latency and the Engine are not applied
	// then, and a streamed call sends its first chunk before it waits.
	Hold chan struct{}
	// Started, when set, gets the path of each call as it starts.
	Started chan string
	// Ended, when set, gets the path of each call as it ends, answered or
	// cut.
	Ended chan string

	mu    sync.Mutex
	stats InferenceStats // requires mu held
	now   inferenceNow   // requires mu held
	win   window         // see TakeWindow; requires mu held
}

type inferenceNow struct {
	all    int
	model  map[string]int
	caller map[string]int
}

// InferenceStats is what the inference API saw.
type InferenceStats struct {
	Calls         int            `json:"calls"`           // completions and embeddings served
	Light         int            `json:"light"`           // other requests
	InFlight      int            `json:"in_flight"`       // calls running now
	Peak          int            `json:"peak"`            // most calls at once
	PeakPerModel  map[string]int `json:"peak_per_model"`  // most calls at once per body "model"
	PeakPerCaller map[string]int `json:"peak_per_caller"` // most calls at once per bearer token
	// Cut is the calls whose client went away (their connection closed)
	// before they were answered: the API stopped them, as vLLM does.
	Cut int `json:"cut"`
	// Tokens is the completion tokens generated, all calls (a cut call's
	// included).
	Tokens int64 `json:"tokens"`
	// Engine is what each model of the Engine did; none without one.
	Engine map[string]EngineModelStats `json:"engine,omitempty"`
}

// Stats returns a copy of what the API saw so far.
func (a *Inference) Stats() InferenceStats {
	a.mu.Lock()
	s := a.stats
	s.PeakPerModel = clone(a.stats.PeakPerModel)
	s.PeakPerCaller = clone(a.stats.PeakPerCaller)
	a.mu.Unlock()
	if a.Engine != nil {
		s.Engine = a.Engine.Models()
	}
	return s
}

// Load returns the calls running now and those failed so far (none: the
// fake fails nothing), for the demo.
func (a *Inference) Load() (inFlight, failed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats.InFlight, 0
}

// TakeWindow returns what the API saw since the last call (or its start)
// and starts a new window, as API.TakeWindow does.
func (a *Inference) TakeWindow() Window {
	a.mu.Lock()
	w := a.win
	a.win = window{peak: a.stats.InFlight}
	a.mu.Unlock()
	return w.result()
}

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// maxInferenceBody bounds the body the fake reads.
const maxInferenceBody = 1 << 20

func (a *Inference) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == StatsPath && r.Method == http.MethodGet:
		writeJSON(w, a.Stats())
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		a.count(func(s *InferenceStats) { s.Light++ })
		models := a.Models
		if len(models) == 0 {
			models = []string{"small", "large"}
		}
		type model struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		}
		out := struct {
			Object string  `json:"object"`
			Data   []model `json:"data"`
		}{Object: "list"}
		for _, m := range models {
			out.Data = append(out.Data, model{m, "model"})
		}
		writeJSON(w, out)
	case r.Method == http.MethodPost && slices.Contains([]string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}, r.URL.Path):
		a.call(w, r)
	default:
		a.count(func(s *InferenceStats) { s.Light++ })
		http.NotFound(w, r)
	}
}

func (a *Inference) count(f func(s *InferenceStats)) {
	a.mu.Lock()
	f(&a.stats)
	a.mu.Unlock()
}

// inferenceRequest is what the fake reads of a call's body.
type inferenceRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	MaxCompletion *int            `json:"max_completion_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// DefaultMaxTokens is the completion tokens of a call that names no
// max_tokens (nor max_completion_tokens).
const DefaultMaxTokens = 256

// maxTokens returns the completion tokens the call asks for.
func (q *inferenceRequest) maxTokens() int {
	switch {
	case q.MaxCompletion != nil:
		return max(*q.MaxCompletion, 1)
	case q.MaxTokens != nil:
		return max(*q.MaxTokens, 1)
	}
	return DefaultMaxTokens
}

// promptTokens estimates the prompt's tokens: a token per 4 bytes of the
// messages (or prompt) as sent, at least 1.
func (q *inferenceRequest) promptTokens() int {
	return max((len(q.Messages)+len(q.Prompt))/4, 1)
}

// call serves one completion or embedding: it reads the body, counts the
// call where it runs, runs it, and answers.
func (a *Inference) call(w http.ResponseWriter, r *http.Request) {
	var q inferenceRequest
	b, err := io.ReadAll(io.LimitReader(r.Body, maxInferenceBody))
	if err != nil || json.Unmarshal(b, &q) != nil || q.Model == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"send a JSON body with a model","type":"invalid_request_error"}}`)
		return
	}
	caller, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	began := a.enter(q.Model, caller)
	answered := false
	defer func() {
		a.leave(q.Model, caller, began, answered)
		if a.Ended != nil {
			a.Ended <- r.URL.Path
		}
	}()
	if a.Started != nil {
		a.Started <- r.URL.Path
	}
	if strings.HasSuffix(r.URL.Path, "/embeddings") {
		if answered = a.wait(r.Context(), nil); answered {
			writeEmbeddings(w, q)
		}
		return
	}
	ans := newCompletion(w, r.URL.Path, q)
	answered = a.complete(r.Context(), ans, q)
}

// complete produces a completion's tokens and answers it; false when its
// client went first.
func (a *Inference) complete(ctx context.Context, ans *completion, q inferenceRequest) bool {
	want := q.maxTokens()
	if a.Hold != nil || a.Engine == nil {
		if !a.wait(ctx, ans) {
			return false
		}
		a.count(func(s *InferenceStats) { s.Tokens += int64(want) })
		ans.chunk(want)
		return ans.end()
	}
	_, err := a.Engine.Generate(ctx, q.Model, q.promptTokens(), want, func(n int) bool {
		a.count(func(s *InferenceStats) { s.Tokens += int64(n) })
		return ans.chunk(n)
	})
	return err == nil && ans.end()
}

// wait holds a call (Hold) or plays its Latency; false when its client
// went first. A streamed completion (ans) starts its answer before it
// holds, as a server streams its first chunk.
func (a *Inference) wait(ctx context.Context, ans *completion) bool {
	if a.Hold != nil {
		if ans != nil && ans.stream {
			ans.start()
		}
		select {
		case <-a.Hold:
			return true
		case <-ctx.Done():
			return false
		}
	}
	d := a.Latency
	if d <= 0 {
		d = 2 * time.Second
	}
	return sleep(ctx, d)
}

func (a *Inference) enter(model, caller string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := &a.now
	if n.model == nil {
		n.model, n.caller = map[string]int{}, map[string]int{}
		a.stats.PeakPerModel, a.stats.PeakPerCaller = map[string]int{}, map[string]int{}
	}
	n.all++
	n.model[model]++
	n.caller[caller]++
	a.stats.Calls++
	a.stats.InFlight = n.all
	a.stats.Peak = max(a.stats.Peak, n.all)
	a.win.peak = max(a.win.peak, n.all)
	a.stats.PeakPerModel[model] = max(a.stats.PeakPerModel[model], n.model[model])
	a.stats.PeakPerCaller[caller] = max(a.stats.PeakPerCaller[caller], n.caller[caller])
	return time.Now()
}

func (a *Inference) leave(model, caller string, began time.Time, answered bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now.all--
	a.now.model[model]--
	a.now.caller[caller]--
	a.stats.InFlight = a.now.all
	if !answered {
		a.stats.Cut++
	}
	a.win.end(time.Since(began), false)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
