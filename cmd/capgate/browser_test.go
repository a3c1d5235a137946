package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/capgate/capgate/internal/browsertest"
)

// The browser tests drive Debian's chromium, headless, through
// internal/browsertest (CAPGATE_CHROMIUM, CAPGATE_REQUIRE_BROWSER: see
// there).

// browser is one headless Chromium tab (browsertest.Browser), its context
// at hand for chromedp's actions.
type browser struct {
	*browsertest.Browser
	ctx context.Context
}

// startBrowser starts Chromium with a fresh profile, within ctx, and
// returns its tab. It skips the test when the browser cannot be found or
// started. The browser is closed at cleanup.
func startBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	b := browsertest.Start(t, ctx)
	return &browser{Browser: b, ctx: b.Context()}
}

// do runs steps within within, failing the test on an error.
func (b *browser) do(t *testing.T, what string, within time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text returns the trimmed text of the element sel selects (CSS), or
// "<none>" when there is none.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](
		fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : "<none>"; })()`, jsString(sel))))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// waitText waits until the text of sel satisfies match (contains want,
// or equals it when exact), failing with what it last was.
func (b *browser) waitText(t *testing.T, sel, want string, exact bool, within time.Duration) {
	t.Helper()
	cond := "t.includes(want)"
	if exact {
		cond = "t === want"
	}
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); const want = %s; if (!e) return false;
		const t = e.textContent.trim(); return %s; })()`, jsString(sel), jsString(want), cond)
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(within)))
	if err != nil {
		t.Fatalf("waiting for %s to show %q: %v; it shows %q", sel, want, err, b.text(t, sel))
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\u2028", `\u2028`, "\u2029", `\u2029`)
	return `"` + r.Replace(s) + `"`
}
