package http

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/header"
	"github.com/capgate/capgate/internal/truncate"
)

// Attribution limits, in characters.
const (
	maxRequestSource = 50
	maxRequestID     = 200
)

// attribute fills in the call's attribution from r's headers, named as
// policy names n says: whether the client handles refusals (the
// client-metadata header's aware field), the metadata keys the log line
// keeps, and the request source.
func (m *Middleware) attribute(call *capgate.Call, r *http.Request, n *wire) {
	var meta map[string]any // nil reads as empty
	if n.Metadata != "" {
		if v := firstValue(r.Header, n.Metadata); v != "" {
			meta = header.ParseEventMetadata(v)
		}
	}
	call.Aware = n.AwareField != "" && header.Aware(meta, n.AwareField)
	for i, k := range n.metaKeys {
		if i < len(call.Metadata) {
			call.Metadata[i] = metadataString(meta, k.Key, k.MaxChars)
		}
	}
	if n.RequestSource != "" {
		call.RequestSource = truncate.Runes(firstValue(r.Header, n.RequestSource), maxRequestSource)
	}
	if h := r.Header.Get(headerTraceID); h != "" {
		call.QueueMS, call.HasQueueMS = parseQueueMS(h, m.now())
	}
}

// metadataString returns the string form of meta[key] (see
// header.MetadataString) cut to its first max characters.
func metadataString(meta map[string]any, key string, max int) string {
	return truncate.Runes(header.MetadataString(meta, key), max)
}

// Queue time bounds: a trace stamp further out is a clock problem or a
// replayed header, not a queue.
const (
	minQueueMS = -2000
	maxQueueMS = 3600 * 1000
)

// parseQueueMS returns how long a request waited before it reached us, in
// milliseconds, from its X-Amzn-Trace-Id header (fields separated by ";",
// white space around them ignored). The load balancer's stamp is the second
// dash-separated part of Self= if present, else of Root=: "1-<hex epoch
// seconds>-…". It reports false when the header or stamp is missing or
// malformed, or the wait is not within (−2 s, 3600 s); a small negative
// wait (clock skew) gives 0.
func parseQueueMS(h string, now time.Time) (ms int64, ok bool) {
	var self, root string
	for field := range strings.SplitSeq(h, ";") {
		field = strings.TrimSpace(field)
		if v, found := strings.CutPrefix(field, "Self="); found {
			self = v
		} else if v, found := strings.CutPrefix(field, "Root="); found {
			root = v
		}
	}
	stamp := self
	if stamp == "" {
		stamp = root
	}
	parts := strings.SplitN(stamp, "-", 3)
	if len(parts) < 2 {
		return 0, false
	}
	epoch, err := strconv.ParseUint(parts[1], 16, 64)
	if err != nil || epoch > math.MaxInt64/1000 { // no overflow in ms below
		return 0, false
	}
	waited := now.UnixMilli() - int64(epoch)*1000
	if waited <= minQueueMS || waited >= maxQueueMS {
		return 0, false
	}
	return max(waited, 0), true
}
