package http

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/policy"
)

// Reading what a call used (a route's usage in the policy) from the
// upstream's answer as it passes on to the client: the answer is never
// held back, only a bounded copy kept beside it. At the answer's end — or
// when the proxy closes it early, the call cut — the copy is read and the
// number recorded on the call's admission (SetUsage), before the
// middleware releases the call, so its line and the fair queue see it.

const (
	// MaxUsageJSONBytes is the most of a JSON answer kept whole to read
	// its usage. Of a longer one (an embeddings answer of many vectors),
	// only the last UsageLookBackBytes are kept, and the usage read from
	// the last member of the top-level object named by the path's first
	// key, if that member lies within them.
	MaxUsageJSONBytes = 1 << 20
	// UsageLookBackBytes is how much of the end of a streamed answer
	// (text/event-stream), or of a JSON answer past MaxUsageJSONBytes, is
	// kept: a stream's usage is read from the last data: event within it
	// that carries the route's path.
	UsageLookBackBytes = 64 << 10
)

// usageBuffers holds the kept copies, each of capacity
// UsageLookBackBytes: a larger one (a JSON answer past it) is dropped.
var usageBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, UsageLookBackBytes)
	return &b
}}

// readUsage is the gateway proxy's ModifyResponse: the body of an answer
// to a gated call of a route with a usage, in a form capgate can read (a
// JSON answer or an event stream, not compressed), is wrapped to keep the
// copy.
func readUsage(res *http.Response) error {
	if res.Request == nil || res.StatusCode < 200 || res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	adm, _ := res.Request.Context().Value(admissionKey{}).(*capgate.Admission)
	if adm == nil {
		return nil
	}
	route := adm.Outcome().Call.Route
	if route == nil || route.Usage.Path() == nil {
		return nil
	}
	if ce := res.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	var stream, tail bool
	switch mt {
	case "application/json":
		tail = res.ContentLength > MaxUsageJSONBytes // its end only, from the start
	case "text/event-stream":
		stream = true
	default:
		return nil
	}
	res.Body = &usageBody{ReadCloser: res.Body, adm: adm, usage: route.Usage, stream: stream, tail: tail}
	return nil
}

// usageBody passes an answer's body on and keeps a bounded copy: the
// whole of a JSON answer up to MaxUsageJSONBytes, else (past it, and for
// a stream) the last UsageLookBackBytes, in a ring once full. The proxy
// reads and closes it from one goroutine.
type usageBody struct {
	io.ReadCloser
	adm    *capgate.Admission
	usage  policy.Usage
	stream bool
	tail   bool // a JSON answer past MaxUsageJSONBytes: its end only

	buf  *[]byte // nil until the first byte, and after the end
	head int     // a full ring's oldest byte
	eof  bool    // the body ended as its upstream said it would
	done bool
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.done {
		b.keep(p[:n])
	}
	if err == io.EOF {
		b.eof = true
		b.finish()
	}
	return n, err
}

// Close reads the usage of what was kept (a cut call reports what it read
// so far) and closes the body.
func (b *usageBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *usageBody) keep(p []byte) {
	if b.buf == nil {
		b.buf = usageBuffers.Get().(*[]byte)
		*b.buf = (*b.buf)[:0]
	}
	buf := *b.buf
	if !b.stream && !b.tail {
		if need := len(buf) + len(p); need <= MaxUsageJSONBytes {
			if need > cap(buf) {
				// Doubling up to the bound (append grows a large slice
				// by less, allocating more in all).
				grown := make([]byte, len(buf), min(max(2*cap(buf), need), MaxUsageJSONBytes))
				buf = grown[:copy(grown, buf)]
			}
			*b.buf = append(buf, p...)
			return
		}
		// Past the bound: its end only from now on, in a pooled buffer.
		b.tail = true
		end := buf[max(0, len(buf)-UsageLookBackBytes):]
		if cap(buf) > UsageLookBackBytes {
			b.buf = usageBuffers.Get().(*[]byte)
		}
		buf = (*b.buf)[:copy((*b.buf)[:len(end)], end)]
		*b.buf = buf
	}
	// The ring: append until full, then overwrite the oldest bytes.
	if room := UsageLookBackBytes - len(buf); room > 0 {
		k := min(room, len(p))
		buf = append(buf, p[:k]...)
		p = p[k:]
		*b.buf = buf
	}
	if len(p) > len(buf) {
		p = p[len(p)-len(buf):]
		b.head = 0
	}
	for len(p) > 0 {
		k := copy(buf[b.head:], p)
		p = p[k:]
		b.head = (b.head + k) % len(buf)
	}
}

// finish reads the usage out of what was kept, once, and records it.
func (b *usageBody) finish() {
	if b.done {
		return
	}
	b.done = true
	if b.buf == nil {
		return
	}
	buf := *b.buf
	read := streamUsage
	if b.tail {
		read = tailUsage
	}
	var n int64
	var ok bool
	switch {
	case !b.stream && !b.tail:
		n, ok = b.usage.Read(buf)
	case b.tail && !b.eof:
		// Cut (the upstream gone, or the client): the end is not the
		// document's, and the kept bytes cannot tell.
	case b.head == 0:
		n, ok = read(buf, b.usage)
	default:
		// A full ring: its bytes in order, in a second buffer.
		line := usageBuffers.Get().(*[]byte)
		*line = append(append((*line)[:0], buf[b.head:]...), buf[:b.head]...)
		n, ok = read(*line, b.usage)
		usageBuffers.Put(line)
	}
	if ok {
		b.adm.SetUsage(n)
	}
	b.free()
}

func (b *usageBody) free() {
	if b.buf != nil && cap(*b.buf) <= UsageLookBackBytes {
		usageBuffers.Put(b.buf)
	}
	b.buf = nil
}

// streamUsage returns the usage of the last complete event of the stream
// end b whose data carries it, looking from the end: the last place the
// path's last key appears, the event around it, and so on backwards.
func streamUsage(b []byte, u policy.Usage) (n int64, ok bool) {
	path := u.Path()
	last := path[len(path)-1]
	for {
		at := bytes.LastIndex(b, []byte(last))
		if at < 0 {
			return 0, false
		}
		start := eventStart(b, at)
		if n, ok = lastEventUsage(b[start:], u); ok {
			return n, true
		}
		b = b[:start]
	}
}

// eventStart returns where the event holding b[at] begins: just past the
// blank line before it, else 0. A blank line is two line ends in a row,
// other than a CRLF's two bytes.
func eventStart(b []byte, at int) int {
	for i := at - 1; i > 0; i-- {
		c, p := b[i], b[i-1]
		if (c == '\n' || c == '\r') && (p == '\n' || p == '\r') && !(p == '\r' && c == '\n') {
			return i + 1
		}
	}
	return 0
}

// lastEventUsage returns the usage of the last complete event in b (the
// end of a text/event-stream) whose data carries it. Lines end in LF,
// CRLF or CR; an event ends at a blank line; its data is its data: lines'
// values (one leading space dropped) joined by LF, as a browser's
// EventSource reads them. A "[DONE]" reads as no usage, like any other
// data that is not JSON. The first event may be cut by the look-back: its
// data then is not valid JSON, or is the whole of its last line's.
func lastEventUsage(b []byte, u policy.Usage) (n int64, ok bool) {
	var data []byte   // the current event's data
	var joined []byte // data of more than one line, allocated when needed
	var lines int     // data: lines in the current event
	path := u.Path()
	last := []byte(path[len(path)-1]) // the cheap test before a parse
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			break // an unfinished line: the stream ended mid-event
		}
		line := b[:i]
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
		if len(line) == 0 { // the event ends
			if lines > 0 && bytes.Contains(data, last) {
				if v, good := u.Read(data); good {
					n, ok = v, true
				}
			}
			data, lines = nil, 0
			continue
		}
		value, isData := bytes.CutPrefix(line, []byte("data:"))
		if !isData {
			continue // a comment, event:, id:, retry:
		}
		value, _ = bytes.CutPrefix(value, []byte(" "))
		lines++
		if lines == 1 {
			data = value
			continue
		}
		if lines == 2 {
			joined = append(joined[:0], data...)
		}
		joined = append(append(joined, '\n'), value...)
		data = joined
	}
	return n, ok
}

// tailUsage returns the usage in b, the end of a JSON document whose
// start is not kept: the value of the last member of the top-level
// object named by the path's first key, read with the rest of the path.
// It walks the object's members back from its closing brace, each value
// matched whole (strings to their opening quote, objects and arrays to
// their balanced opening bracket), so a key inside a nested value or a
// string is never taken for one. ok is false when the document does not
// end in an object, the walk reaches b's start before finding the member
// (what came before is not known), or the member and those after it are
// not valid JSON. b is changed: the byte before the member becomes '{'.
func tailUsage(b []byte, u policy.Usage) (n int64, ok bool) {
	key := u.Path()[0]
	i := lastNonWS(b, len(b))
	if i < 0 || b[i] != '}' {
		return 0, false
	}
	for {
		// b[i] is the '}' or the ',' after a member.
		if i = lastNonWS(b, i); i < 0 || b[i] == '{' {
			return 0, false // the object's start: no such member
		}
		v := valueStart(b, i)
		if v < 0 {
			return 0, false
		}
		if i = lastNonWS(b, v); i < 0 || b[i] != ':' {
			return 0, false
		}
		if i = lastNonWS(b, i); i < 0 || b[i] != '"' {
			return 0, false
		}
		k := stringStart(b, i)
		if k < 0 {
			return 0, false
		}
		name := b[k : i+1]
		if i = lastNonWS(b, k); i < 0 || (b[i] != ',' && b[i] != '{') {
			return 0, false
		}
		if keyIs(name, key) {
			b[i] = '{' // from here, an object: the member and those after it
			return u.Read(b[i:])
		}
		if b[i] == '{' {
			return 0, false
		}
	}
}

// lastNonWS returns the index of the last byte of b[:end] that is not
// JSON whitespace, -1 if none.
func lastNonWS(b []byte, end int) int {
	for end--; end >= 0; end-- {
		if c := b[end]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return end
		}
	}
	return -1
}

// valueStart returns the index where the JSON value ending at b[end]
// starts, -1 when that is not within b or there is no value there.
func valueStart(b []byte, end int) int {
	switch b[end] {
	case '"':
		return stringStart(b, end)
	case '}', ']':
		depth := 0
		for i := end; i >= 0; i-- {
			switch b[i] {
			case '"':
				if i = stringStart(b, i); i < 0 {
					return -1
				}
			case '}', ']':
				depth++
			case '{', '[':
				if depth--; depth == 0 {
					return i
				}
			}
		}
		return -1
	case ',', ':', '{', '[':
		return -1
	}
	// A number, true, false or null: back to the byte before it.
	for i := end; i > 0; i-- {
		switch b[i-1] {
		case ',', ':', '[', '{', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return -1 // it may start before b
}

// stringStart returns the index of the opening quote of the JSON string
// whose closing quote is b[end]: the last quote before it that is not
// escaped, that is, not after an odd number of backslashes. -1 when it is
// not within b, or when the backslashes before a quote run to b's start
// (more may come before).
func stringStart(b []byte, end int) int {
	for j := end; ; {
		q := bytes.LastIndexByte(b[:j], '"')
		if q < 0 {
			return -1
		}
		s := q
		for s > 0 && b[s-1] == '\\' {
			s--
		}
		if s == 0 {
			return -1
		}
		if (q-s)%2 == 0 {
			return q
		}
		j = s
	}
}

// keyIs reports whether the JSON string literal lit is key. A key with
// escapes (rare) is decoded to be compared.
func keyIs(lit []byte, key string) bool {
	s := lit[1 : len(lit)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s) == key
	}
	var v string
	return json.Unmarshal(lit, &v) == nil && v == key
}
