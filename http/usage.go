package http

import (
	"bytes"
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
	// MaxUsageJSONBytes is the most of a JSON answer kept to read its
	// usage: a longer answer reports none.
	MaxUsageJSONBytes = 1 << 20
	// UsageLookBackBytes is how much of the end of a streamed answer
	// (text/event-stream) is kept: the usage is read from the last data:
	// event within it that carries the route's path.
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
// JSON answer of at most MaxUsageJSONBytes, or an event stream; not
// compressed), is wrapped to keep the copy.
func readUsage(res *http.Response) error {
	if res.Request == nil || res.StatusCode < 200 || res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	adm, _ := res.Request.Context().Value(admissionKey{}).(*capgate.Admission)
	if adm == nil {
		return nil
	}
	route := adm.Call().Route
	if route == nil || route.Usage.Path() == nil {
		return nil
	}
	if ce := res.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	var stream bool
	switch mt {
	case "application/json":
		if res.ContentLength > MaxUsageJSONBytes {
			return nil
		}
	case "text/event-stream":
		stream = true
	default:
		return nil
	}
	res.Body = &usageBody{ReadCloser: res.Body, adm: adm, usage: route.Usage, stream: stream}
	return nil
}

// usageBody passes an answer's body on and keeps a bounded copy: the
// whole of a JSON answer (until it is too long), the last
// UsageLookBackBytes of a stream, in a ring once full. The proxy reads
// and closes it from one goroutine.
type usageBody struct {
	io.ReadCloser
	adm    *capgate.Admission
	usage  policy.Usage
	stream bool

	buf  *[]byte // nil until the first byte, and after the end
	head int     // a full ring's oldest byte
	over bool    // a JSON answer past MaxUsageJSONBytes: none
	done bool
}

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.done && !b.over {
		b.keep(p[:n])
	}
	if err == io.EOF {
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
	if !b.stream {
		if len(buf)+len(p) > MaxUsageJSONBytes {
			b.over = true
			b.free()
			return
		}
		*b.buf = append(buf, p...)
		return
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
	var n int64
	var ok bool
	switch {
	case !b.stream:
		n, ok = b.usage.Read(buf)
	case b.head == 0:
		n, ok = streamUsage(buf, b.usage)
	default:
		// A full ring: its bytes in order, in a second buffer.
		line := usageBuffers.Get().(*[]byte)
		*line = append(append((*line)[:0], buf[b.head:]...), buf[:b.head]...)
		n, ok = streamUsage(*line, b.usage)
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
