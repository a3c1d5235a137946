package client

import (
	"context"
	"net/http"
)

// Doer sends heavy calls through a Transport and reports how each went.
// It is safe for concurrent use.
type Doer struct {
	// Client sends the requests; its Transport must be (or wrap) the
	// *Transport.
	Client *http.Client
}

// NewDoer returns a Doer whose client uses t.
func NewDoer(t *Transport) *Doer {
	return &Doer{Client: &http.Client{Transport: t}}
}

// Do sends req as the heavy call c, under ctx. The error is the client's
// (a *url.Error wrapping, for example, a *ThrottledError); Result is filled
// either way. The caller must close the response body.
func (d *Doer) Do(ctx context.Context, req *http.Request, c Call) (*http.Response, Result, error) {
	var res Result
	c.Result = &res
	resp, err := d.Client.Do(req.WithContext(WithCall(ctx, c)))
	return resp, res, err
}
