package decide

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// UnixPrefix marks a unix socket address: unix:/run/capgate.sock.
const UnixPrefix = "unix:"

// ErrNoToken is returned by Listen for a TCP address without a token.
var ErrNoToken = errors.New("a TCP address needs a shared secret (--decide-token); without one only a unix socket, or a loopback address with --decide-no-token, is allowed")

// Listen opens the decision service's address: "unix:<path>" (a socket
// file left there by a process that is gone is removed first) or
// host:port. A TCP address needs a token, unless allowNoToken is set and
// the address is loopback (127.0.0.0/8, ::1, localhost): anyone who can
// reach the port could otherwise hold every place in every lane.
func Listen(addr, token string, allowNoToken bool) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		if path == "" {
			return nil, fmt.Errorf("%q: want unix:<path>", addr)
		}
		removeStaleSocket(path)
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, nil
	}
	if token == "" && !(allowNoToken && loopback(addr)) {
		return nil, fmt.Errorf("%s: %w", addr, ErrNoToken)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// removeStaleSocket removes the socket file at path if nobody answers on
// it; anything else there is left for net.Listen to refuse.
func removeStaleSocket(path string) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		return
	}
	if c, err := net.DialTimeout("unix", path, 100*time.Millisecond); err == nil {
		c.Close() // in use: let Listen fail
		return
	}
	_ = os.Remove(path)
}

// loopback reports whether addr's host is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// NewHTTPServer returns the http.Server for s: headers must arrive within
// 10 s, and there is no read or write timeout, since a held call's
// connection stays open (and a read deadline would end it).
func NewHTTPServer(s *Server, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves s on ln until ctx is done, then ends the held calls, waits
// at most timeout for their handlers, and closes s.
func Serve(ctx context.Context, s *Server, ln net.Listener, timeout time.Duration, logger *slog.Logger) error {
	hs := NewHTTPServer(s, logger)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.Shutdown()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		_ = hs.Close()
	}
	s.Wait(sctx) // the calls' connections, which net/http no longer tracks
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, s.Close(sctx))
}
