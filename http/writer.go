package http

import (
	"bufio"
	"net"
	"net/http"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/answer"
)

// gatedWriter sets a gated call's headers just before its response
// header is written: the capacity headers, X-Request-ID and the CORS
// expose list. It keeps http.ResponseController working through Unwrap,
// and implements http.Flusher and http.Hijacker for handlers that assert
// them. Like any ResponseWriter, it is used by one goroutine at a time.
type gatedWriter struct {
	http.ResponseWriter
	adm   *capgate.Admission
	rid   string // X-Request-ID
	wrote bool   // the response header was written
}

func (w *gatedWriter) setHeaders() {
	if w.wrote {
		return
	}
	w.wrote = true
	answer.SetGated(w.ResponseWriter.Header(), w.adm.Outcome(), w.rid)
}

func (w *gatedWriter) WriteHeader(code int) {
	// Informational answers (103 Early Hints) go out as they are; the
	// capacity headers ride on the final one.
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.setHeaders()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.setHeaders()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher; it does nothing when the underlying
// writer can't flush.
func (w *gatedWriter) Flush() {
	w.setHeaders()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker; it fails with http.ErrNotSupported
// when the underlying writer can't be hijacked.
func (w *gatedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
