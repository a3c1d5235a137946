package http

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// statusPagePath is where StaffHandler serves the staff status page.
const statusPagePath = "/capacity/"

//go:embed page/index.html page/page.css page/page.js
var pageFiles embed.FS

// The markers in page/index.html that the stylesheet and the script
// replace.
const (
	pageStyleMarker  = "<!--PAGE_CSS-->"
	pageScriptMarker = "<!--PAGE_JS-->"
)

// statusPage is the built page: one HTML document with its stylesheet and
// script inlined, and the Content-Security-Policy that allows exactly
// those two (by hash) and fetches to this origin.
type statusPage struct {
	html []byte
	csp  string
}

// loadStatusPage builds the page once; the embedded files cannot change,
// so an error here is a bug in them, reported on every request.
var loadStatusPage = sync.OnceValues(func() (*statusPage, error) {
	read := func(name string) ([]byte, error) {
		b, err := pageFiles.ReadFile("page/" + name)
		if err != nil {
			return nil, fmt.Errorf("status page: %w", err)
		}
		return b, nil
	}
	html, err := read("index.html")
	if err != nil {
		return nil, err
	}
	css, err := read("page.css")
	if err != nil {
		return nil, err
	}
	js, err := read("page.js")
	if err != nil {
		return nil, err
	}
	if bytes.Count(html, []byte(pageStyleMarker)) != 1 || bytes.Count(html, []byte(pageScriptMarker)) != 1 {
		return nil, fmt.Errorf("status page: index.html must hold %s and %s once each", pageStyleMarker, pageScriptMarker)
	}
	html = bytes.Replace(html, []byte(pageStyleMarker), append(append([]byte("<style>"), css...), "</style>"...), 1)
	html = bytes.Replace(html, []byte(pageScriptMarker), append(append([]byte("<script>"), js...), "</script>"...), 1)
	hash := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	csp := "default-src 'none'; connect-src 'self'; img-src 'self' data:; " +
		"style-src " + hash(css) + "; script-src " + hash(js) + "; " +
		"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
	return &statusPage{html: html, csp: csp}, nil
})

// serveStatusPage answers GET and HEAD /capacity/ with the staff status
// page: a shell with no data in it, so it is served to anyone, signed in
// or not. Everything it shows it fetches from the staff API, which applies
// the staff rule (anonymous 401, non-staff 403) to every fetch.
//
// Auth design: the page asks for the staff member's API token once, keeps
// it in sessionStorage (this tab only, gone when the tab closes) and sends
// it as "Authorization: Token <t>" on each fetch. It first tries without
// one, so behind an auth proxy (identity.Header) it needs no token at all.
// We chose this over a login that sets a session cookie because it adds
// no server state (sessions would have to be shared between gateways),
// works unchanged with every Identifier, and gives cross-site requests no
// ambient credential to ride on, so there is nothing to forge (no CSRF).
// The token is exposed only to script running on the page, which the
// Content-Security-Policy limits to the page's own script, and the page
// writes data into the document as text only, never as markup.
//
// Other methods get 405 with Allow.
func serveStatusPage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		staffError(w, http.StatusMethodNotAllowed, "Method \""+r.Method+"\" not allowed.")
		return
	}
	p, err := loadStatusPage()
	if err != nil {
		staffError(w, http.StatusInternalServerError, "The status page is broken: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(p.html)))
	h.Set("Content-Security-Policy", p.csp)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(p.html)
	}
}
