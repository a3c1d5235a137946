package http_test

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestStatusPageIsServedToAnyone checks that GET /capacity/ gives the page
// shell without credentials, while the data behind it stays staff only.
func TestStatusPageIsServedToAnyone(t *testing.T) {
	s := newStaffServer(t)
	for _, token := range []string{"", "user-token", "staff-token"} {
		req, _ := http.NewRequest("GET", s.URL+"/capacity/", nil)
		if token != "" {
			req.Header.Set("Authorization", "Token "+token)
		}
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("token %q: GET /capacity/ = %d %q, want 200 text/html", token, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, want := range []string{`<title>capgate`, `id="login-form"`, `id="change-form"`, `aria-live="polite"`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("token %q: the page lacks %s", token, want)
			}
		}
		for _, marker := range []string{"<!--PAGE_CSS-->", "<!--PAGE_JS-->"} {
			if strings.Contains(string(body), marker) {
				t.Errorf("the page still holds %s", marker)
			}
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", got)
		}
	}
	// The data stays behind the staff rule.
	if code, _, _ := s.do(t, "GET", "/capacity/status/", "", ""); code != 401 {
		t.Errorf("anonymous GET /capacity/status/ = %d, want 401", code)
	}
	if code, _, _ := s.do(t, "GET", "/capacity/status/", "user-token", ""); code != 403 {
		t.Errorf("non-staff GET /capacity/status/ = %d, want 403", code)
	}
}

// TestStatusPagePolicyAllowsItsOwnScriptOnly checks that the
// Content-Security-Policy names the hashes of the inline style and script
// the page holds (a wrong hash would stop the page working in a browser)
// and allows nothing from elsewhere.
func TestStatusPagePolicyAllowsItsOwnScriptOnly(t *testing.T) {
	s := newStaffServer(t)
	resp, err := s.Client().Get(s.URL + "/capacity/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, tag := range []string{"style", "script"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllSubmatch(body, -1)
		if len(m) != 1 {
			t.Fatalf("the page has %d inline <%s> elements, want 1", len(m), tag)
		}
		sum := sha256.Sum256(m[0][1])
		want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
		t.Errorf("the page allows inline code or names another site; CSP %q", csp)
	}
}

func TestStatusPageMethods(t *testing.T) {
	s := newStaffServer(t)
	resp, err := s.Client().Head(s.URL + "/capacity/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength <= 0 {
		t.Errorf("HEAD /capacity/ = %d, length %d; want 200 and the page's length", resp.StatusCode, resp.ContentLength)
	}
	code, h, body := s.do(t, "POST", "/capacity/", "staff-token", "{}")
	if code != 405 || h.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /capacity/ = %d Allow %q, want 405 GET, HEAD", code, h.Get("Allow"))
	}
	if m, _ := body.(map[string]any); m["detail"] != `Method "POST" not allowed.` {
		t.Errorf("POST /capacity/ body = %v", body)
	}
	// Only the exact path is the page.
	if code, _, _ := s.do(t, "GET", "/capacity/nope/", "staff-token", ""); code != 404 {
		t.Errorf("GET /capacity/nope/ = %d, want 404", code)
	}
}
