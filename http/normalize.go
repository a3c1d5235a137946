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

// queryLast returns the last value of key in a raw query, read as Python's
// parse_qsl (under Django's QueryDict) reads it: pairs split on "&" only, a
// pair without "=" has an empty value, "+" is a space, and a malformed
// percent escape is kept as it is. It returns "" when the key is absent.
func queryLast(raw, key string) (v string) {
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		if pyUnquote(k) == key {
			v = pyUnquote(val)
		}
	}
	return v
}

// pyUnquote decodes "+" and percent escapes as Python's unquote_plus does,
// leaving a malformed escape as it is.
func pyUnquote(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
