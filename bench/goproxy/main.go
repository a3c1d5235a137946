// Command goproxy is the baseline of bench/run.sh for what a Go reverse
// proxy costs before capgate adds anything: net/http/httputil.ReverseProxy
// with capgate's upstream transport (capgatehttp.NewTransport), nothing
// else. With -pool it reuses its 32 KiB copy buffers (ReverseProxy's
// BufferPool), which capgate's gateway does not set.
//
//	goproxy -listen 127.0.0.1:8081 -upstream http://127.0.0.1:8000 [-pool]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	capgatehttp "github.com/capgate/capgate/http"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	upstream := flag.String("upstream", "", "the upstream URL")
	pool := flag.Bool("pool", false, "reuse the copy buffers (ReverseProxy.BufferPool)")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		fmt.Fprintln(os.Stderr, "goproxy: give -upstream http://host:port")
		os.Exit(2)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: capgatehttp.NewTransport(),
		ErrorLog:  log.New(io.Discard, "", 0), // a client cut off at the end of a wrk run is no news
	}
	if *pool {
		rp.BufferPool = capgatehttp.NewBufferPool()
	}
	srv := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "goproxy:", err)
		os.Exit(1)
	}
}
