package http

import (
	"net"
	"net/http"
	"time"
)

// Defaults of NewTransport, sized for heavy calls that run for minutes.
const (
	// DefaultResponseHeaderTimeout is how long the upstream may take to
	// start its answer: 11 minutes.
	DefaultResponseHeaderTimeout = 11 * time.Minute
	// DefaultDialTimeout bounds connecting to the upstream.
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleConnTimeout is how long an idle upstream connection is
	// kept.
	DefaultIdleConnTimeout = 90 * time.Second
	// DefaultMaxIdleConnsPerHost is how many idle upstream connections are
	// kept (net/http's default of 2 would make a busy gateway reconnect).
	DefaultMaxIdleConnsPerHost = 256
)

// NewTransport returns the gateway's upstream transport: no proxy from the
// environment, DefaultDialTimeout to connect, DefaultResponseHeaderTimeout
// for the upstream to start answering, no overall deadline (a response may
// stream for as long as it takes), DefaultMaxIdleConnsPerHost idle
// connections kept for DefaultIdleConnTimeout, and no transparent
// compression, so bodies pass byte for byte.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   DefaultDialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       DefaultIdleConnTimeout,
		MaxIdleConns:          4 * DefaultMaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   DefaultMaxIdleConnsPerHost,
		DisableCompression:    true,
	}
}
