package simapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/capgate/capgate/tools/simapi"
)

// A call alone gets a token every StepTime × (1 + 1/BatchKnee); two at
// once each get one every StepTime × (1 + 2/BatchKnee): slower each, more
// tokens a second in all.
func TestEngineBatchSlowsEachCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &simapi.Engine{StepTime: time.Millisecond, BatchKnee: 8, DefaultKVTokens: 10000}
		start := time.Now()
		if n, err := e.Generate(t.Context(), "m", 10, 80, func(int) bool { return true }); n != 80 || err != nil {
			t.Fatalf("Generate = %d, %v", n, err)
		}
		if got, want := time.Since(start), 90*time.Millisecond; got != want {
			t.Errorf("one call of 80 tokens took %v; want %v", got, want)
		}
		start = time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { e.Generate(t.Context(), "m", 10, 80, func(int) bool { return true }) })
		}
		wg.Wait()
		if got, want := time.Since(start), 100*time.Millisecond; got != want {
			t.Errorf("two calls of 80 tokens at once took %v; want %v", got, want)
		}
		if e.Tokens() != 240 {
			t.Errorf("Tokens = %d; want 240", e.Tokens())
		}
	})
}

// Past its KV cache a model queues calls, first come first served, and
// thrashes while they wait: every step slower by SwapCost × waiting /
// running. A call whose client goes frees its cache at once.
func TestEngineKVCacheQueuesAndThrashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := &simapi.Engine{StepTime: time.Millisecond, BatchKnee: 1, KVTokens: map[string]int{"m": 100}, SwapCost: 1, ChunkTokens: 10}
		ctx := t.Context()
		ends := make(chan time.Duration, 3)
		start := time.Now()
		run := func(ctx context.Context, want int) {
			e.Generate(ctx, "m", 10, want, func(int) bool { return true })
			ends <- time.Since(start)
		}
		go run(ctx, 50) // 60 of 100
		synctest.Wait()
		cut, cancel := context.WithCancel(ctx)
		go run(cut, 50) // 60 more: waits
		synctest.Wait()
		if m := e.Models()["m"]; m.Running != 1 || m.Queued != 1 || m.PeakKV != 60 || m.KVTokens != 100 {
			t.Fatalf("model %+v; want 1 running on 60 of 100, 1 waiting", m)
		}
		// The first: its first chunk alone, 10 tokens of 1 ms × (1 + 1/1);
		// then thrashing for the one waiting, each token 1 ms × (1 + 1/1) ×
		// (1 + 1 × 1/1) = 4 ms.
		if got := <-ends; got != 20*time.Millisecond+40*4*time.Millisecond {
			t.Errorf("the first call took %v; want 180ms (10 tokens, then 40 thrashing)", got)
		}
		synctest.Wait()
		if m := e.Models()["m"]; m.Running != 1 || m.Queued != 0 {
			t.Fatalf("model %+v after the first ended; want the waiting call running", m)
		}
		go run(ctx, 10) // a third waits behind it
		synctest.Wait()
		cancel() // the second's client goes: its cache frees, the third runs
		<-ends
		synctest.Wait()
		if m := e.Models()["m"]; m.Running != 1 || m.Queued != 0 || m.PeakQueue != 1 {
			t.Fatalf("model %+v after a running call was cut; want the third running", m)
		}
		<-ends
	})
}

// The fake answers in OpenAI's shapes: a chat completion with its usage;
// streamed, chunks of content, the finish reason, the usage in a last
// chunk when asked for, then [DONE]. A client that goes away stops its
// call (Cut), which no longer counts in flight.
func TestInferenceStreams(t *testing.T) {
	api := &simapi.Inference{Engine: &simapi.Engine{StepTime: 100 * time.Microsecond}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	code, body := post(t, srv.URL, "/v1/chat/completions", "x", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Content string } `json:"message"`
			FinishReason string                   `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || code != 200 || c.Object != "chat.completion" || len(c.Choices) != 1 ||
		c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 9 || c.Usage.TotalTokens <= 9 ||
		len(strings.Fields(c.Choices[0].Message.Content)) != 9 {
		t.Fatalf("chat completion %d %s (%v)", code, body, err)
	}

	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, line)
		}
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream %v %q; want event-stream events ending [DONE]", resp.Header, events)
	}
	var last, usage struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        struct{ Content string } `json:"delta"`
			FinishReason *string                  `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal([]byte(events[len(events)-3]), &last)
	json.Unmarshal([]byte(events[len(events)-2]), &usage)
	if last.Object != "chat.completion.chunk" || len(last.Choices) != 1 || last.Choices[0].FinishReason == nil ||
		len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens != 10 {
		t.Errorf("the last events %q; want the finish reason, then the usage of 10 tokens", events[len(events)-3:])
	}

	// A stream its client leaves.
	slow := &simapi.Inference{Engine: &simapi.Engine{StepTime: 10 * time.Millisecond, ChunkTokens: 1}, Ended: make(chan string, 1)}
	srv2 := httptest.NewServer(slow)
	defer srv2.Close()
	req, _ = http.NewRequest("POST", srv2.URL+"/v1/completions", strings.NewReader(`{"model":"m","max_tokens":100000,"stream":true}`))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	select {
	case <-slow.Ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the call still runs 10 s after its client left")
	}
	if st := slow.Stats(); st.Cut != 1 || st.InFlight != 0 || st.Tokens >= 100000 {
		t.Errorf("stats %+v; want the call cut", st)
	}
}
