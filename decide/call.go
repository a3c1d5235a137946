// Package decide is capgate's decision service: the streamed HTTP/1.1
// protocol (docs/PROTOCOL.md) through which an app decides its own heavy
// calls with the gate every gateway uses. The app names the caller and the
// call (it has already authenticated and parsed the request); the service
// admits it through the same capgate.Gate — lanes, the fair wait, the
// ocl_capacity line — and holds the call's leases for as long as the app
// keeps the response open.
package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/internal/truncate"
)

// MaxCallBytes bounds the JSON body of POST /v1/calls.
const MaxCallBytes = 16 << 10

// Attribution limits, in characters, as the gateway's.
const (
	maxRequestSource = 50
	maxRequestID     = 200
)

// callRequest is the JSON body of POST /v1/calls: one heavy call as the
// app sees it. Unknown fields are refused.
type callRequest struct {
	User          string   `json:"user"`
	Tier          string   `json:"tier,omitempty"`
	Groups        []string `json:"groups,omitempty"`
	IsStaff       bool     `json:"is_staff,omitempty"`
	Endpoint      string   `json:"endpoint"`
	Semantic      bool     `json:"semantic,omitempty"`
	Reranker      bool     `json:"reranker,omitempty"`
	Rows          int      `json:"rows"`
	Aware         bool     `json:"aware,omitempty"`
	RequestID     string   `json:"request_id,omitempty"`
	Task          string   `json:"task,omitempty"`
	RequestSource string   `json:"request_source,omitempty"`
	// Running: the call runs already and its earlier connection dropped
	// (the service restarted): counted again, forced (docs/PROTOCOL.md).
	Running bool `json:"running,omitempty"`
	// RepeatKey is the app's key for the call (its client's
	// Idempotency-Key, or a hash of the request): with idempotency on, a
	// call whose key a call still running holds joins it
	// (docs/PROTOCOL.md). Fingerprint hashes what makes the request the
	// same request: the same key with another is reused.
	RepeatKey   string `json:"repeat_key,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// maxRepeatKey bounds repeat_key and fingerprint, in bytes, as the
// gateway bounds an Idempotency-Key.
const maxRepeatKey = 255

// checkRepeat checks repeat_key and fingerprint: at most maxRepeatKey
// visible ASCII characters each (they are hashed, never stored in clear,
// but a key is an id, not a payload).
func (c callRequest) checkRepeat() error {
	for _, f := range []struct{ name, v string }{{"repeat_key", c.RepeatKey}, {"fingerprint", c.Fingerprint}} {
		if len(f.v) > maxRepeatKey {
			return fmt.Errorf(`%q must be at most %d characters`, f.name, maxRepeatKey)
		}
		for i := 0; i < len(f.v); i++ {
			if f.v[i] < 0x21 || f.v[i] > 0x7e {
				return fmt.Errorf(`%q must be visible ASCII characters`, f.name)
			}
		}
	}
	if c.Fingerprint != "" && c.RepeatKey == "" {
		return errors.New(`"fingerprint" goes with "repeat_key"`)
	}
	return nil
}

// taskPattern is what a task id may be: it becomes part of a lane key.
var taskPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// decodeCall reads one callRequest from body, refusing unknown fields,
// trailing data and anything past MaxCallBytes. The error's text is meant
// for the client.
func decodeCall(body io.Reader) (callRequest, error) {
	b, err := io.ReadAll(io.LimitReader(body, MaxCallBytes+1))
	if err != nil {
		return callRequest{}, fmt.Errorf("read the call: %w", err)
	}
	if len(b) > MaxCallBytes {
		return callRequest{}, fmt.Errorf("the call is larger than %d bytes", MaxCallBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c callRequest
	if err := dec.Decode(&c); err != nil {
		return callRequest{}, fmt.Errorf("the call is not a JSON object of the protocol's fields: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return callRequest{}, errors.New("the call is followed by more data; send one JSON object")
	}
	return c, nil
}

// call checks c and returns the capgate.Call it names; tiers are resolved
// from groups and is_staff as the gateway's identity does.
func (c callRequest) call(groups capgate.TierGroups) (capgate.Call, error) {
	switch {
	case c.User == "":
		return capgate.Call{}, errors.New(`"user" is required: the caller's username`)
	case utf8.RuneCountInString(c.User) > identity.MaxUsername:
		return capgate.Call{}, fmt.Errorf(`"user" is longer than %d characters`, identity.MaxUsername)
	case c.Endpoint != capgate.EndpointMatch && c.Endpoint != capgate.EndpointRerank:
		return capgate.Call{}, fmt.Errorf(`"endpoint" %q: want %q or %q`, c.Endpoint, capgate.EndpointMatch, capgate.EndpointRerank)
	case c.Rows < 0:
		return capgate.Call{}, errors.New(`"rows" must be 0 (unknown, gated as bulk) or more`)
	case c.Tier != "" && (len(c.Groups) > 0 || c.IsStaff):
		return capgate.Call{}, errors.New(`give "tier", or "groups" and "is_staff", not both`)
	case c.Task != "" && !taskPattern.MatchString(c.Task):
		return capgate.Call{}, errors.New(`"task" must be 1 to 64 letters, digits or . _ : -`)
	}
	if err := c.checkRepeat(); err != nil {
		return capgate.Call{}, err
	}
	tier := groups.TierOf(c.IsStaff, c.Groups)
	if c.Tier != "" {
		tier = capgate.Tier(c.Tier)
		if !validTier(tier) {
			return capgate.Call{}, fmt.Errorf(`"tier" %q: want one of %v`, c.Tier, capgate.AllTiers())
		}
	}
	rid := c.RequestID
	if rid == "" {
		rid = randhex.String(16)
	}
	return capgate.Call{
		Endpoint:      c.Endpoint,
		Rows:          c.Rows,
		Semantic:      c.Semantic,
		Reranker:      c.Reranker,
		UserID:        c.User,
		Tier:          tier,
		Aware:         c.Aware,
		RequestSource: truncate.Runes(c.RequestSource, maxRequestSource),
		CID:           truncate.Runes(rid, maxRequestID),
	}, nil
}

func validTier(t capgate.Tier) bool {
	for _, v := range capgate.AllTiers() {
		if v == t {
			return true
		}
	}
	return false
}
