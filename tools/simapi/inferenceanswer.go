package simapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The answers of the fake inference API, in OpenAI's shapes: a chat
// completion ("chat.completion", its message) or a completion
// ("text_completion", its text), with its usage; streamed, one
// "chat.completion.chunk" (or "text_completion") event per chunk of
// tokens, the finish reason in the last, the usage in one more event with
// no choices when stream_options.include_usage is set, then "data:
// [DONE]".

// completionIDs numbers the completions of a process.
var completionIDs atomic.Int64

// completion is one completion's answer as it is made.
type completion struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	chat    bool
	stream  bool
	usage   bool // streamed: the usage in a last event
	id      string
	model   string
	created int64
	prompt  int
	want    int
	tokens  int
	text    strings.Builder // not streamed: the content so far
	started bool
	failed  bool // a write failed: the client is gone
}

func newCompletion(w http.ResponseWriter, path string, q inferenceRequest) *completion {
	c := &completion{w: w, rc: http.NewResponseController(w), chat: strings.HasSuffix(path, "/chat/completions"),
		stream: q.Stream, usage: q.StreamOptions != nil && q.StreamOptions.IncludeUsage,
		id: fmt.Sprintf("cmpl-simapi-%d", completionIDs.Add(1)), model: q.Model, created: time.Now().Unix(),
		prompt: q.promptTokens(), want: q.maxTokens()}
	if c.chat {
		c.id = "chat" + c.id
	}
	return c
}

// words are the completion's text, a word a token.
var words = []string{"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "}

func (c *completion) content(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(words[(c.tokens+i)%len(words)])
	}
	return b.String()
}

func (c *completion) object() string {
	switch {
	case c.chat && c.stream:
		return "chat.completion.chunk"
	case c.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// start sends a streamed answer's header, flushed.
func (c *completion) start() {
	if c.started {
		return
	}
	c.started = true
	if c.stream {
		c.w.Header().Set("Content-Type", "text/event-stream")
		c.w.Header().Set("Cache-Control", "no-cache")
		c.w.WriteHeader(http.StatusOK)
		c.failed = c.rc.Flush() != nil
	}
}

// chunk adds n tokens: streamed, one event; false when the client is gone.
func (c *completion) chunk(n int) bool {
	text := c.content(n)
	c.tokens += n
	if !c.stream {
		c.text.WriteString(text)
		return true
	}
	c.start()
	return c.event(c.choice(text, nil))
}

// finish is why the completion ended: its max_tokens.
const finish = "length"

func (c *completion) choice(text string, reason *string) map[string]any {
	ch := map[string]any{"index": 0, "finish_reason": reason}
	switch {
	case c.chat && c.stream:
		ch["delta"] = map[string]string{"content": text}
	case c.chat:
		ch["message"] = map[string]string{"role": "assistant", "content": text}
	default:
		ch["text"] = text
	}
	return ch
}

func (c *completion) usageOf() map[string]int {
	return map[string]int{"prompt_tokens": c.prompt, "completion_tokens": c.tokens, "total_tokens": c.prompt + c.tokens}
}

// event sends one streamed event carrying choice (none: the usage event).
func (c *completion) event(choice map[string]any) bool {
	if c.failed {
		return false
	}
	v := map[string]any{"id": c.id, "object": c.object(), "created": c.created, "model": c.model}
	if choice != nil {
		v["choices"] = []any{choice}
	} else {
		v["choices"] = []any{}
		v["usage"] = c.usageOf()
	}
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(c.w, "data: %s\n\n", b); err != nil {
		c.failed = true
		return false
	}
	c.failed = c.rc.Flush() != nil
	return !c.failed
}

// end sends the rest of the answer; false when the client is gone.
func (c *completion) end() bool {
	reason := finish
	if !c.stream {
		writeJSON(c.w, map[string]any{"id": c.id, "object": c.object(), "created": c.created, "model": c.model,
			"choices": []any{c.choice(c.text.String(), &reason)}, "usage": c.usageOf()})
		return true
	}
	c.start()
	if !c.event(c.choice("", &reason)) {
		return false
	}
	if c.usage && !c.event(nil) {
		return false
	}
	if _, err := fmt.Fprint(c.w, "data: [DONE]\n\n"); err != nil {
		return false
	}
	return c.rc.Flush() == nil
}

// writeEmbeddings answers an embeddings call: a vector per text of its
// input (a string, token ids, or a list of either).
func writeEmbeddings(w http.ResponseWriter, q inferenceRequest) {
	n := 1
	var list []json.RawMessage
	if json.Unmarshal(q.Input, &list) == nil && len(list) > 0 {
		if b := strings.TrimSpace(string(list[0])); b == "" || b[0] == '"' || b[0] == '[' {
			n = len(list) // texts, or token-id lists; else one text as token ids
		}
	}
	data := make([]map[string]any, n)
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": []float64{0.1, 0.2}}
	}
	tokens := max(len(q.Input)/4, 1)
	writeJSON(w, map[string]any{"object": "list", "model": q.Model, "data": data,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}})
}
