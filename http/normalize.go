package http

import (
	"net/http"
	"net/url"
	"strings"
)

// normalizeRequest makes r read as the API behind the gateway (gunicorn and
// Django) reads it, before it is classified and forwarded: the method in
// upper case (Django upper-cases it, so "post" is a POST), and the request
// target cut at the first "#" (gunicorn drops a fragment, and what follows
// it, query included). It changes r in place; the middleware calls it
// first.
func normalizeRequest(r *http.Request) {
	if m := r.Method; m != strings.ToUpper(m) {
		r.Method = strings.ToUpper(m)
	}
	raw, _, cut := strings.Cut(r.RequestURI, "#")
	if !cut {
		return
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return // net/http parsed the whole; the part before "#" parses too
	}
	r.URL.Path, r.URL.RawPath, r.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	r.URL.ForceQuery, r.URL.Fragment, r.URL.RawFragment = false, "", ""
	r.RequestURI = raw
}
