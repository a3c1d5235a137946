// Package client sends the heavy calls of a capgate-gated API so
// that a refusal is waited out fairly instead of failing or stampeding.
//
// Mark a request as heavy by attaching a Call to its context (WithCall),
// and send it through a Transport, or use a Doer, which does both and
// reports a Result:
//
//	tr := client.NewTransport(nil) // one per process, shared by every caller
//	d := client.NewDoer(tr)
//	resp, res, err := d.Do(ctx, req, client.Call{Class: client.Bulk, IdempotencyKey: key})
//	switch {
//	case errors.Is(err, client.ErrThrottled): // not run: the server stayed busy; try later
//	case errors.Is(err, client.ErrOutcomeUnknown): // may have run: check before redoing it
//	case err != nil: // the context ended, or the API could not be reached
//	default: // the API's answer; close resp.Body
//	}
//
// Transport's documentation is the manual: what is sent, what a refusal
// does, which calls a pause holds back, the in-flight bound, the queue
// order, budgets and retries. Stats gives the counters for a load report.
package client
