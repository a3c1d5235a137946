package http

import (
	"net"
	"net/http"
	"time"
)

// Defaults of NewTransport, sized for heavy calls that run for minutes.
const (
	// defaultResponseHeaderTimeout is how long the upstream may take to
	// start its answer: 11 minutes.
	defaultResponseHeaderTimeout = 11 * time.Minute
	// defaultDialTimeout bounds connecting to the upstream.
	defaultDialTimeout = 10 * time.Second
	// defaultIdleConnTimeout is how long an idle upstream connection is
	// kept.
	defaultIdleConnTimeout = 90 * time.Second
	// defaultMaxIdleConnsPerHost is how many idle upstream connections are
	// kept (net/http's default of 2 would make a busy gateway reconnect).
	defaultMaxIdleConnsPerHost = 256
)

// NewTransport returns the gateway's upstream transport: no proxy from the
// environment, 10 s to connect, 11 minutes for the upstream to start
// answering, no overall deadline (a response may stream for as long as it
// takes), 256 idle connections kept for 90 s, and no transparent
// compression, so bodies pass byte for byte.
func NewTransport() *http.Transport {
	return &http.Transport{
		// Each connection says when it is closed: a call cut because its
		// client left (on_client_gone: cancel) frees its place once the
		// upstream has seen its connection close (clientgone.go).
		DialContext: trackedDial((&net.Dialer{
			Timeout:   defaultDialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext),
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: defaultResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       defaultIdleConnTimeout,
		MaxIdleConns:          4 * defaultMaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   defaultMaxIdleConnsPerHost,
		DisableCompression:    true,
	}
}
