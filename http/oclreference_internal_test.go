package http

// The OCL classifier as it was before the gateway read a policy: the
// reference the OCL policy is checked against request by request
// (policy_diff_internal_test.go, and the fuzz seeds there). Test code only:
// the gateway classifies with the policy (classify.go).

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/capgate/capgate/internal/jsonscan"
)

// oclCall is what the OCL classifier said of a heavy call.
type oclCall struct {
	Endpoint           string
	Rows               int
	Semantic, Reranker bool
}

// singleRow reports whether the call may use the reserved single-row slot.
func (c oclCall) singleRow() bool { return c.Endpoint == "$match" && c.Rows == 1 }

// oclReference is the OCL profile's classifier: a POST to
// <prefix>/concepts/$match/ whose JSON body has a non-empty rows array and
// whose query has semantic or reranker truthy, and a POST to
// <prefix>/concepts/$rerank/ with a non-empty rows array and a truthy q.
type oclReference struct {
	c *Classifier // its buffer and limits
}

// classify is the reference's ClassifyFunc: heavyPath, then
// classifyBody. A call whose body would overrun the Budget is not heavy.
func (o oclReference) classify(r *http.Request) (oclCall, bool) {
	normalizeRequest(r)
	call, ok := o.heavyPath(r)
	if !ok {
		return oclCall{}, false
	}
	call, heavy, _ := o.classifyBody(r, call)
	return call, heavy
}

// heavyPath decides from the method, path and query alone (no body read)
// whether r may be a heavy call, and describes what it can. Call
// normalizeRequest first.
func (o oclReference) heavyPath(r *http.Request) (oclCall, bool) {
	if r.Method != http.MethodPost {
		return oclCall{}, false
	}
	endpoint := o.endpoint(r.URL.Path)
	call := oclCall{Endpoint: endpoint}
	switch endpoint {
	case "$match":
		if !asciiCharset(contentType(r)) {
			// Django decodes the query in the body's charset too (utf-16
			// percent escapes can spell semantic=true): unreadable here,
			// so assume the most lanes.
			call.Semantic, call.Reranker = true, true
			return call, true
		}
		call.Semantic = truthy(queryLast(r.URL.RawQuery, "semantic"))
		call.Reranker = truthy(queryLast(r.URL.RawQuery, "reranker"))
		if !call.Semantic && !call.Reranker {
			return oclCall{}, false // lexical: not gated, body untouched
		}
	case "$rerank":
	default:
		return oclCall{}, false
	}
	return call, true
}

// classifyBody reads the body of a call heavyPath accepted and completes
// call: heavy with its rows, heavy as bulk (Rows 0) when the body can't be
// read as the API would, or not heavy. It returns ErrBufferFull (and not
// heavy) when the Budget is spent; r.Body then still gives every byte.
func (o oclReference) classifyBody(r *http.Request, call oclCall) (oclCall, bool, error) {
	c := o.c
	for _, ce := range r.Header.Values("Content-Encoding") {
		if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
			return call, true, nil // compressed: unreadable here, gate as bulk
		}
	}
	body, over, err := c.buffer(r)
	if err != nil {
		if c.BufferFull != nil {
			c.BufferFull()
		}
		return oclCall{}, false, err
	}
	if over {
		if c.Oversize != nil {
			c.Oversize()
		}
		return call, true, nil
	}
	if body == nil {
		return oclCall{}, false, nil
	}
	doc, readable := decodeCharset(contentType(r), body)
	if !readable {
		return call, true, nil
	}
	rows, ok := parseBody(doc, call.Endpoint == "$rerank")
	if !ok {
		return oclCall{}, false, nil
	}
	call.Rows = rows
	return call, true, nil
}

// endpoint returns the heavy endpoint that path names, or "".
func (o oclReference) endpoint(path string) string {
	c := o.c
	rest, ok := strings.CutPrefix(path, strings.TrimSuffix(c.PathPrefix, "/"))
	if !ok {
		return ""
	}
	rest, ok = strings.CutPrefix(rest, "/concepts/")
	if !ok {
		return ""
	}
	switch strings.TrimSuffix(rest, "/") {
	case "$match":
		return "$match"
	case "$rerank":
		return "$rerank"
	}
	return ""
}

// truthy reports whether a query parameter's value is true, True or 1
// (compared case-insensitively, a superset of what the API takes).
func truthy(v string) bool {
	return v == "1" || strings.EqualFold(v, "true")
}

// parseBody reports what a heavy-path JSON body holds: rows a non-empty array
// and, when needQ, q truthy as Python sees it (a non-empty string, a non-zero
// number, true, a non-empty array or object). The API's $rerank refuses a
// falsy q; treating every truthy one as heavy is the conservative side of
// the rule "q a non-empty string".
func parseBody(body []byte, needQ bool) (rows int, ok bool) {
	if !json.Valid(body) {
		return 0, false
	}
	rowsVal, qVal, isObject := topLevel(body)
	if !isObject {
		return 0, false
	}
	rows = jsonscan.ArrayLen(rowsVal)
	if rows == 0 {
		return 0, false
	}
	if needQ && !jsonscan.PyTruthy(qVal) {
		return 0, false
	}
	return rows, true
}

// topLevel returns the raw values of the keys "rows" and "q" (exact match,
// after unescaping; the last of duplicates) of a valid JSON document, and
// whether it is an object.
func topLevel(b []byte) (rows, q []byte, isObject bool) {
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i++
	for {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) || b[i] == '}' {
			return rows, q, true
		}
		kEnd := jsonscan.ValueEnd(b, i)
		key := b[i:kEnd]
		i = jsonscan.SkipWS(b, kEnd)
		i = jsonscan.SkipWS(b, i+1) // the ':'
		vEnd := jsonscan.ValueEnd(b, i)
		switch keyString(key) {
		case "rows":
			rows = b[i:vEnd]
		case "q":
			q = b[i:vEnd]
		}
		i = jsonscan.SkipWS(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
}

// keyString decodes a JSON string literal; only keys with escapes cost a
// decode.
func keyString(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	_ = json.Unmarshal(lit, &s)
	return s
}

// queryLast returns the last value of key in a raw query, read as Python's
// parse_qsl (under Django's QueryDict) reads it: pairs split on "&" only, a
// pair without "=" has an empty value, "+" is a space, and a malformed
// percent escape is kept as it is. It returns "" when the key is absent.
func queryLast(raw, key string) (v string) {
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		if pyUnquote(k) == key {
			v = pyUnquote(val)
		}
	}
	return v
}

// pyUnquote decodes "+" and percent escapes as Python's unquote_plus does,
// leaving a malformed escape as it is.
func pyUnquote(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
