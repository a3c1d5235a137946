package simapi

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Inference is a fake OpenAI-compatible inference API, for the inference
// policy's example (examples/inference) and its end-to-end test: POST
// /v1/chat/completions, /v1/completions and /v1/embeddings answer after
// Latency (or when Hold gives a value), GET /v1/models lists Models, and
// it records how many calls ran at once — in all, per model and per caller
// (by bearer token) — so a test can check that a gateway in front of it
// kept every limit. GET StatsPath serves them as JSON. Set its fields
// before serving; safe for concurrent use.
type Inference struct {
	Models []string // what GET /v1/models lists; default "small", "large"
	// Latency is how long a call takes. Default 2 s.
	Latency time.Duration
	// Hold, when set, is received from before a call answers (tests hold
	// calls in flight with it); Latency is not applied then.
	Hold chan struct{}
	// Started, when set, gets the path of each call as it starts.
	Started chan string

	mu    sync.Mutex
	stats InferenceStats // requires mu held
	now   inferenceNow   // requires mu held
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
}

// Stats returns a copy of what the API saw so far.
func (a *Inference) Stats() InferenceStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.PeakPerModel = clone(a.stats.PeakPerModel)
	s.PeakPerCaller = clone(a.stats.PeakPerCaller)
	return s
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

// call serves one completion or embedding: it reads the model from the
// body, counts the call where it runs, waits, and answers.
func (a *Inference) call(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model string `json:"model"`
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxInferenceBody))
	if err != nil || json.Unmarshal(b, &body) != nil || body.Model == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"send a JSON body with a model","type":"invalid_request_error"}}`)
		return
	}
	caller, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	a.enter(body.Model, caller)
	defer a.leave(body.Model, caller)
	if a.Started != nil {
		a.Started <- r.URL.Path
	}
	latency := func() time.Duration {
		if a.Latency <= 0 {
			return 2 * time.Second
		}
		return a.Latency
	}
	if !work(w, r, nil, 0, false, a.Hold, latency) {
		return
	}
	if strings.HasSuffix(r.URL.Path, "/embeddings") {
		writeJSON(w, map[string]any{"object": "list", "model": body.Model,
			"data": []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2}}}})
		return
	}
	writeJSON(w, map[string]any{"object": "chat.completion", "model": body.Model,
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": "ok"}}}})
}

func (a *Inference) enter(model, caller string) {
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
	a.stats.PeakPerModel[model] = max(a.stats.PeakPerModel[model], n.model[model])
	a.stats.PeakPerCaller[caller] = max(a.stats.PeakPerCaller[caller], n.caller[caller])
}

func (a *Inference) leave(model, caller string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now.all--
	a.now.model[model]--
	a.now.caller[caller]--
	a.stats.InFlight = a.now.all
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
