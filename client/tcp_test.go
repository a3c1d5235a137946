package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/capgate/capgate/client"
	"github.com/capgate/capgate/header"
)

// Over real TCP, without a fake clock: only paths that do not wait.
func TestOverTCP(t *testing.T) {
	var meta string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		meta = r.Header.Get(ocl.Metadata)
		admit(w, 2)
	}))
	tr := client.NewTransport(srv.Client().Transport)
	tr.Names = ocl
	tr.MaxDialRetries = -1
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/concepts/$match/?reranker=true", nil)
	resp, res, err := client.NewDoer(tr).Do(context.Background(), req, client.Call{Class: client.Interactive})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !header.Aware(header.ParseEventMetadata(meta), ocl.AwareField) || res.Decision != "admitted" || res.Suggested != 2 {
		t.Errorf("metadata %q, result %+v", meta, res)
	}
	srv.Close()
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/concepts/$match/?reranker=true", nil)
	_, res, err = client.NewDoer(tr).Do(context.Background(), req, client.Call{})
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, client.ErrOutcomeUnknown) || res.Attempts != 1 {
		t.Errorf("closed server: %v, %+v; want a refused connection, not an unknown outcome", err, res)
	}
}
