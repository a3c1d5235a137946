package http_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	capgatehttp "github.com/capgate/capgate/http"
)

func TestClassifier(t *testing.T) {
	const two = `{"rows":[{"id":"1"},{"id":"2"}]}`
	tests := []struct {
		name, method, target, body string
		prefix                     string
		want                       oclView
		heavy                      bool
	}{
		{name: "semantic match", method: "POST", target: "/concepts/$match/?semantic=true", body: two,
			want: oclView{"$match", 2, true, false}, heavy: true},
		{name: "reranked match", method: "POST", target: "/concepts/$match/?reranker=True", body: two,
			want: oclView{"$match", 2, false, true}, heavy: true},
		{name: "both, 1 and TRUE", method: "POST", target: "/concepts/$match/?semantic=1&reranker=TRUE", body: `{"rows":[1]}`,
			want: oclView{"$match", 1, true, true}, heavy: true},
		{name: "no trailing slash", method: "POST", target: "/concepts/$match?semantic=true", body: two,
			want: oclView{"$match", 2, true, false}, heavy: true},
		{name: "percent-encoded dollar", method: "POST", target: "/concepts/%24match/?semantic=true", body: two,
			want: oclView{"$match", 2, true, false}, heavy: true},
		{name: "last query value wins", method: "POST", target: "/concepts/$match/?semantic=true&semantic=false", body: two},
		{name: "lexical match", method: "POST", target: "/concepts/$match/", body: two},
		{name: "semantic false", method: "POST", target: "/concepts/$match/?semantic=false&reranker=yes", body: two},
		{name: "empty rows", method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":[]}`},
		{name: "rows missing", method: "POST", target: "/concepts/$match/?semantic=true", body: `{"q":"x"}`},
		{name: "rows null", method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":null}`},
		{name: "rows an object", method: "POST", target: "/concepts/$match/?semantic=true", body: `{"rows":{"a":1}}`},
		{name: "not JSON", method: "POST", target: "/concepts/$match/?semantic=true", body: `rows=1`},
		{name: "trailing garbage", method: "POST", target: "/concepts/$match/?semantic=true", body: two + `x`},
		{name: "a GET", method: "GET", target: "/concepts/$match/?semantic=true", body: two},
		{name: "rerank", method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{},{}],"q":"fever"}`,
			want: oclView{"$rerank", 2, false, false}, heavy: true},
		{name: "rerank ignores semantic", method: "POST", target: "/concepts/$rerank?semantic=true", body: `{"rows":[{}],"q":"a"}`,
			want: oclView{"$rerank", 1, false, false}, heavy: true},
		{name: "rerank without q", method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}]}`},
		{name: "rerank empty q", method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":""}`},
		{name: "rerank q a number (truthy to Python)", method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":5}`,
			want: oclView{"$rerank", 1, false, false}, heavy: true},
		{name: "rerank q zero", method: "POST", target: "/concepts/$rerank/", body: `{"rows":[{}],"q":0}`},
		{name: "other path", method: "POST", target: "/concepts/$matchx/?semantic=true", body: two},
		{name: "nested path", method: "POST", target: "/orgs/x/concepts/$match/?semantic=true", body: two},
		{name: "prefix", method: "POST", target: "/api/concepts/$match/?semantic=true", body: two, prefix: "/api/",
			want: oclView{"$match", 2, true, false}, heavy: true},
		{name: "prefix missing", method: "POST", target: "/concepts/$match/?semantic=true", body: two, prefix: "/api"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &capgatehttp.Classifier{PathPrefix: tt.prefix}
			r := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			call, heavy := c.Classify(r)
			if got := viewOf(t, call, heavy); heavy != tt.heavy || got != tt.want {
				t.Errorf("Classify = %+v, %v; want %+v, %v", got, heavy, tt.want, tt.heavy)
			}
			// Whatever it decided, the handler behind reads the body unchanged.
			b, err := io.ReadAll(r.Body)
			if err != nil || string(b) != tt.body {
				t.Errorf("body after Classify = %q, %v; want %q", b, err, tt.body)
			}
			if err := r.Body.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}

			// In two steps, as the middleware does: the path and query,
			// then the body, the same call.
			r = httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			capgatehttp.NormalizeRequest(r)
			first, maybe := c.HeavyPath(r)
			if !maybe {
				if tt.heavy {
					t.Fatalf("HeavyPath = false for a heavy call")
				}
				return
			}
			if first.Route != nil {
				t.Errorf("HeavyPath found route %q; the body decides it", first.Route.Name)
			}
			call, heavy, err = c.ClassifyBody(r, first)
			if got := viewOf(t, call, heavy); err != nil || heavy != tt.heavy || got != tt.want {
				t.Errorf("ClassifyBody = %+v, %v, %v; want %+v, %v", got, heavy, err, tt.want, tt.heavy)
			}
			if b, err := io.ReadAll(r.Body); err != nil || string(b) != tt.body {
				t.Errorf("body after ClassifyBody = %q, %v; want %q", b, err, tt.body)
			}
			r.Body.Close()
		})
	}
}

func TestClassifierOversizeBody(t *testing.T) {
	// A valid heavy body one byte over the limit is gated as bulk (rows
	// unknown) and passes byte for byte, whether or not its length is
	// announced.
	body := []byte(`{"rows":[{"id":"1"}],"pad":"` + strings.Repeat("x", 100) + `"}`)
	for _, announced := range []bool{true, false} {
		var counted int
		c := &capgatehttp.Classifier{MaxBodyBytes: int64(len(body) - 1), Oversize: func() { counted++ }}
		r := httptest.NewRequest("POST", "/concepts/$match/?semantic=true", bytes.NewReader(body))
		if !announced {
			r.ContentLength = -1
			r.Body = io.NopCloser(iotest.OneByteReader(bytes.NewReader(body)))
		}
		if call, heavy := c.Classify(r); viewOf(t, call, heavy) != (oclView{"$match", 0, true, false}) || call.Fields.BodyKnown() {
			t.Errorf("announced=%v: oversize body = %+v, %v; want heavy, rows 0, the body unknown", announced, viewOf(t, call, heavy), heavy)
		}
		if counted != 1 {
			t.Errorf("announced=%v: Oversize called %d times, want 1", announced, counted)
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("announced=%v: body = %q, %v; want the original", announced, got, err)
		}
	}

	// At exactly the limit it is read and classified.
	c := &capgatehttp.Classifier{MaxBodyBytes: int64(len(body))}
	r := httptest.NewRequest("POST", "/concepts/$match/?semantic=true", bytes.NewReader(body))
	if _, heavy := c.Classify(r); !heavy {
		t.Error("body at the limit not classified heavy")
	}
}

func TestClassifierReadAfterClose(t *testing.T) {
	c := &capgatehttp.Classifier{}
	r := httptest.NewRequest("POST", "/concepts/$match/?semantic=1", strings.NewReader(`{"rows":[1]}`))
	if _, heavy := c.Classify(r); !heavy {
		t.Fatal("not heavy")
	}
	r.Body.Close()
	r.Body.Close() // idempotent
	if n, err := r.Body.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Errorf("Read after Close = %d, %v; want an error", n, err)
	}
}

func TestClassifierLeavesUninterestingBodiesAlone(t *testing.T) {
	c := &capgatehttp.Classifier{}
	for _, target := range []string{"/concepts/$match/", "/concepts/", "/concepts/$rerank/x"} {
		body := io.NopCloser(strings.NewReader(`{"rows":[1]}`))
		r := httptest.NewRequest("POST", target, nil)
		r.Body = body
		c.Classify(r)
		if r.Body != body {
			t.Errorf("%s: the body was replaced", target)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/concepts/$rerank/", nil)
	if _, heavy := c.Classify(r); heavy {
		t.Error("no body classified heavy")
	}
}
