package http

import (
	"errors"
	"net/http"
	"net/textproto"
	"strings"
)

// One reading of the request. capgate decides on the request the API will
// receive, never on a reading of its own: the gateway builds the request it
// forwards first (the headers a Connection header names removed, the
// headers only a trusted proxy may set removed, the query as it will be
// sent), and the middleware classifies and identifies that request. The
// proxy then sends it as it is, the query byte for byte. Headers sent more
// than once are read as the API's server joins them (gunicorn: every value
// of a name joined with ",", except Content-Type and Content-Length, of
// which it keeps the last).

// errHopByHopRead is the reason for the 400 of a request whose Connection
// header names a header capgate reads.
var errHopByHopRead = errors.New("the Connection header names a header the gateway needs to read")

// readHeader reports whether capgate decides anything by the header named
// by canonical key k: credentials, the body's framing and type, the host,
// the forwarding headers, and the headers the routes of the policy in
// force read (n: their predicates and fields). A Connection header naming one would make the
// proxy drop it after capgate had read it, so the API would act on a
// request capgate did not see.
func readHeader(k string, n *wire) bool {
	switch k {
	case "Authorization", "Cookie", "Content-Type", "Content-Length", "Content-Encoding",
		"Transfer-Encoding", "Host", "Forwarded":
		return true
	}
	return n.reads[k] || strings.HasPrefix(k, "X-Forwarded-") || strings.HasPrefix(k, capgateHeaderPrefix)
}

// outgoing returns the request the gateway will forward for r: r itself
// when nothing changes, else a copy with its own headers. It returns
// errHopByHopRead when r's Connection header names a header capgate reads.
// The Upgrade header is dropped unless r may upgrade (upgrade); a
// Connection token naming Upgrade is left for the proxy, which carries
// allowed upgrades itself.
func (g *Gateway) outgoing(r *http.Request, upgrade bool) (*http.Request, error) {
	var drop []string
	n := wireOf(g.cfg.Classifier.Policy())
	named := false // Connection names a header, not only close, keep-alive or upgrade
	for _, v := range r.Header["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			tok = textproto.TrimString(tok)
			if tok == "" {
				continue
			}
			k := http.CanonicalHeaderKey(tok)
			if readHeader(k, n) {
				return nil, errHopByHopRead
			}
			switch k {
			case "Close", "Upgrade", "Connection":
			case "Keep-Alive":
				// What most clients send: a copy only when a
				// Keep-Alive header is there to drop.
				named = named || r.Header["Keep-Alive"] != nil
			default:
				named = true
			}
		}
	}
	if named {
		// The named headers are dropped now, so capgate decides on the
		// request without them, and the Connection header with them: the
		// proxy would otherwise also drop a header the gateway adds
		// later under a name it lists (X-Request-ID).
		for _, v := range r.Header["Connection"] {
			for tok := range strings.SplitSeq(v, ",") {
				if k := http.CanonicalHeaderKey(textproto.TrimString(tok)); k != "" && k != "Upgrade" {
					drop = append(drop, k)
				}
			}
		}
		drop = append(drop, "Connection")
	}
	if !upgrade && hasUpgrade(r.Header) {
		drop = append(drop, "Upgrade")
	}
	trusted := g.trusted(r.RemoteAddr)
	for k := range r.Header {
		if stripped(k, trusted) {
			drop = append(drop, k)
		}
	}
	if len(drop) == 0 {
		return r, nil
	}
	out := r.WithContext(r.Context()) // a shallow copy: r is net/http's
	out.Header = r.Header.Clone()
	for _, k := range drop {
		delete(out.Header, k)
	}
	if named && upgrade && hasUpgrade(r.Header) {
		out.Header["Connection"] = []string{"Upgrade"} // for the proxy, which carries the upgrade
	}
	return out, nil
}

// stripped reports whether the header named k is removed before forwarding.
// A "_" in a name: WSGI servers map "-" and "_" alike, so X_Capgate_User
// would pass as X-Capgate-User, and gunicorn takes a SCRIPT_NAME header as
// the mount point, moving the path the API routes away from the one
// classified. X-Capgate-* only from a trusted proxy.
func stripped(k string, trusted bool) bool {
	return strings.Contains(k, "_") || !trusted && len(k) >= len(capgateHeaderPrefix) &&
		strings.EqualFold(k[:len(capgateHeaderPrefix)], capgateHeaderPrefix)
}

// joined returns the values of the header named by canonical key k as the
// API's server hands it to the application: joined with "," (gunicorn).
func joined(h http.Header, k string) string {
	v := h[k]
	switch len(v) {
	case 0:
		return ""
	case 1:
		return v[0]
	}
	return strings.Join(v, ",")
}

// outgoingQuery returns the raw query the upstream is sent: the upstream
// URL's own query, if any, then the request's, byte for byte.
// httputil.ReverseProxy would re-encode a query it can't parse (one with
// ";" or a bad "%" escape), dropping pairs the classifier had read.
func outgoingQuery(target, in string) string {
	switch {
	case target == "":
		return in
	case in == "":
		return target
	}
	return target + "&" + in
}
