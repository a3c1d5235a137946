// Package policy is capgate's policy model: which requests of an API are
// heavy calls and what fields they carry (routes), who the caller is and
// what tier they are on (identity), where each call is counted (lanes), and
// what capgate calls things on the wire (names). A policy is data, one YAML
// file whose schema docs/POLICY.md describes; OCL returns the built-in one,
// the OCL profile.
//
// The model, before any code:
//
//   - A route matches a request by method, path (exact, prefix or a pattern
//     of segments) and predicates on the query, headers and JSON body, and
//     extracts the call's fields: a query flag, a body string, the length of
//     a body array, a header value. Routes are tried in order; the first
//     that matches makes the request a heavy call. A request no route
//     matches passes untouched.
//   - A lane is a count of calls in flight with a limit. Its scope says
//     what one count covers: the cluster, one API task, or one value of a
//     key (the user, the tier, or a call field such as the model). A lane
//     names the routes that take it; its limit is one number or one per
//     tier, and lives in the runtime config under a key the lane names. A
//     lane may reserve part of its limit for a class of calls.
//   - A route gives a call a cost in seats per lane: a constant, or
//     ceil(field / per) capped at a maximum, never below 1. Every call takes
//     one seat until a route says otherwise; a gate that does not count
//     seats yet reads every cost as 1.
//
// Parse refuses a policy it cannot run as written: every error names the
// file, the line and the field, an unknown field comes with the nearest
// valid name, and a policy naming an unknown lane, field, tier, route or
// class, with a route that can never match, or with a lane no route takes,
// is refused whole.
//
// Evaluation is pure and allocates nothing: an Evaluator reads a Request
// (the request as the gateway forwards it) into Fields, which hold offsets
// into the request's own bytes; only turning a body string into a Go string
// (Fields.String) allocates.
package policy
