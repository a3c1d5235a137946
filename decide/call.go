// Package decide is capgate's decision service: the streamed HTTP/1.1
// protocol (docs/PROTOCOL.md) through which an app decides its own heavy
// calls with the gate every gateway uses. The app names the caller and the
// call (it has already authenticated and parsed the request); the service
// admits it through the same capgate.Gate — lanes, the fair wait, the
// per-call log line — and holds the call's leases for as long as the app
// keeps the response open.
package decide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/internal/truncate"
	"github.com/capgate/capgate/policy"
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
//
// The call is named by its policy route, "route" (the route's name) with
// its "fields" (by the route's field names), or, as the first protocol
// did, "endpoint" (the route's log name) with the fields
// "semantic", "reranker" and "rows" at the top level, each taken by the
// route's field of that name when it has one.
type callRequest struct {
	User          string                     `json:"user"`
	Tier          string                     `json:"tier,omitempty"`
	Groups        []string                   `json:"groups,omitempty"`
	IsStaff       bool                       `json:"is_staff,omitempty"`
	Route         string                     `json:"route,omitempty"`
	Fields        map[string]json.RawMessage `json:"fields,omitempty"`
	Endpoint      string                     `json:"endpoint"`
	Semantic      *bool                      `json:"semantic,omitempty"`
	Reranker      *bool                      `json:"reranker,omitempty"`
	Rows          *int                       `json:"rows"`
	Aware         bool                       `json:"aware,omitempty"`
	RequestID     string                     `json:"request_id,omitempty"`
	Task          string                     `json:"task,omitempty"`
	RequestSource string                     `json:"request_source,omitempty"`
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
	// Conservative: count the call as the most expensive reading of its
	// route (of the policy's most expensive route when it names none the
	// policy has), whatever its fields say — the app could not read the
	// call, or the service refused its reading (conservativeCall).
	Conservative bool `json:"conservative,omitempty"`
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

// call checks c and returns the capgate.Call it names under policy p;
// tiers are resolved from groups and is_staff as the gateway's identity
// does (p's tier rules).
func (c callRequest) call(p *policy.Policy) (capgate.Call, error) {
	if c.Conservative {
		return c.conservativeCall(p), nil
	}
	switch {
	case c.User == "":
		return capgate.Call{}, errors.New(`"user" is required: the caller's username`)
	case utf8.RuneCountInString(c.User) > identity.MaxUsername:
		return capgate.Call{}, fmt.Errorf(`"user" is longer than %d characters`, identity.MaxUsername)
	case c.Tier != "" && (len(c.Groups) > 0 || c.IsStaff):
		return capgate.Call{}, errors.New(`give "tier", or "groups" and "is_staff", not both`)
	case c.Task != "" && !taskPattern.MatchString(c.Task):
		return capgate.Call{}, errors.New(`"task" must be 1 to 64 letters, digits or . _ : -`)
	}
	route, err := c.route(p)
	if err != nil {
		return capgate.Call{}, err
	}
	fields, err := c.fields(route)
	if err != nil {
		return capgate.Call{}, err
	}
	if err := c.checkRepeat(); err != nil {
		return capgate.Call{}, err
	}
	tier := p.Identity.TierOf(c.IsStaff, c.Groups)
	if c.Tier != "" {
		tier = c.Tier
		if p.TierIndex(tier) < 0 {
			return capgate.Call{}, fmt.Errorf(`"tier" %q: want one of %v`, c.Tier, p.Tiers())
		}
	}
	rid := c.RequestID
	if rid == "" {
		rid = randhex.String(16)
	}
	return capgate.Call{
		Route:         route,
		Fields:        fields,
		UserID:        c.User,
		Tier:          tier,
		Aware:         c.Aware,
		RequestSource: truncate.Runes(c.RequestSource, maxRequestSource),
		CID:           truncate.Runes(rid, maxRequestID),
	}, nil
}

// route returns the policy route the call names: "route" by name, or
// "endpoint" by log name.
func (c callRequest) route(p *policy.Policy) (*policy.Route, error) {
	switch {
	case c.Route != "" && c.Endpoint != "":
		return nil, errors.New(`give "route" or "endpoint", not both`)
	case c.Route != "":
		if r := p.Route(c.Route); r != nil {
			return r, nil
		}
		names := make([]string, len(p.Routes))
		for i, r := range p.Routes {
			names[i] = r.Name
		}
		return nil, fmt.Errorf(`"route" %q: want %s`, c.Route, orList(names))
	}
	if r := p.RouteByLogName(c.Endpoint); r != nil {
		return r, nil
	}
	names := make([]string, len(p.Routes))
	for i, r := range p.Routes {
		names[i] = r.LogName
	}
	if c.Endpoint == "" {
		return nil, fmt.Errorf(`"route" is required: want %s`, orList(routeNames(p)))
	}
	return nil, fmt.Errorf(`"endpoint" %q: want %s`, c.Endpoint, orList(names))
}

func routeNames(p *policy.Policy) []string {
	out := make([]string, len(p.Routes))
	for i, r := range p.Routes {
		out[i] = r.Name
	}
	return out
}

// orList quotes names as a sentence does: "a", "a" or "b", "a", "b" or "c".
func orList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) <= 1 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// fields returns the call's fields of route r: "fields" by name (each of
// its type: a JSON boolean, whole number or string), and the first
// protocol's top-level "semantic", "reranker" and "rows" for the route's
// fields of those names. A field not given is its zero value; a whole
// number below 0 is refused (0 is unknown: the route's largest case).
func (c callRequest) fields(r *policy.Route) (policy.Fields, error) {
	f := policy.NewFields(r)
	if c.Rows != nil && *c.Rows < 0 {
		return f, errors.New(`"rows" must be 0 (unknown, gated as bulk) or more`)
	}
	for _, top := range []struct {
		name string
		b    *bool
		n    *int
	}{{"semantic", c.Semantic, nil}, {"reranker", c.Reranker, nil}, {"rows", nil, c.Rows}} {
		i := r.Field(top.name)
		switch {
		case i < 0:
		case top.b != nil:
			f.SetBool(i, *top.b)
		case top.n != nil:
			f.SetInt(i, *top.n)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Fields)) {
		raw := c.Fields[name]
		i := r.Field(name)
		if i < 0 {
			var names []string
			for _, fd := range r.Fields {
				names = append(names, fd.Name)
			}
			if len(names) == 0 {
				return f, fmt.Errorf(`"fields.%s": route %q has no fields`, name, r.Name)
			}
			return f, fmt.Errorf(`"fields.%s": route %q has no such field (its fields: %s)`, name, r.Name, strings.Join(names, ", "))
		}
		var ok bool
		switch t := r.Fields[i].Kind.Type(); t {
		case policy.TypeBool:
			var b bool
			ok = json.Unmarshal(raw, &b) == nil && f.SetBool(i, b)
		case policy.TypeInt:
			var n int
			if ok = json.Unmarshal(raw, &n) == nil; ok && n < 0 {
				return f, fmt.Errorf(`"fields.%s" must be 0 or more`, name)
			}
			ok = ok && f.SetInt(i, n)
		default:
			var s string
			ok = json.Unmarshal(raw, &s) == nil && f.SetString(i, s)
		}
		if !ok {
			return f, fmt.Errorf(`"fields.%s" must be %s`, name, map[policy.Type]string{policy.TypeBool: "true or false",
				policy.TypeInt: "a whole number", policy.TypeString: "a string"}[r.Fields[i].Kind.Type()])
		}
	}
	return f, nil
}

// conservativeCall returns the call c names, read at its most expensive
// (policy.Policy.Conservative): the app sends it when it could not read
// the call, or when the service refused the call it read (400). It is
// never refused for what it names, so that an error on the caller's side
// is counted, never left uncounted: a user that is empty or too long is
// UnidentifiedUser, a tier the policy lacks is resolved from the groups
// and is_staff (the default tier without them), a bad task is the
// service's own, the fields given are ignored, the call is capacity-aware
// (refused under enforce_for aware too) and never deduplicated.
func (c callRequest) conservativeCall(p *policy.Policy) capgate.Call {
	route := p.Route(c.Route)
	if route == nil && c.Endpoint != "" {
		route = p.RouteByLogName(c.Endpoint)
	}
	route, fields := p.Conservative(route)
	user := c.User
	if user == "" || utf8.RuneCountInString(user) > identity.MaxUsername {
		user = capgate.UnidentifiedUser
	}
	tier := c.Tier
	if tier == "" || p.TierIndex(tier) < 0 {
		tier = p.Identity.TierOf(c.IsStaff, c.Groups)
	}
	rid := c.RequestID
	if rid == "" {
		rid = randhex.String(16)
	}
	return capgate.Call{
		Route:         route,
		Fields:        fields,
		UserID:        user,
		Tier:          tier,
		Aware:         true,
		RequestSource: truncate.Runes(c.RequestSource, maxRequestSource),
		CID:           truncate.Runes(rid, maxRequestID),
	}
}

// conservativeRequest returns c, and for a conservative call c with its
// task cleared when it is no valid task id (the service's own task counts
// it), and its repeat_key and fingerprint cleared.
func (c callRequest) conservativeRequest() callRequest {
	if !c.Conservative {
		return c
	}
	if c.Task != "" && !taskPattern.MatchString(c.Task) {
		c.Task = ""
	}
	c.RepeatKey, c.Fingerprint = "", ""
	return c
}
