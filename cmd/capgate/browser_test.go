package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/skipnote"
	"github.com/chromedp/chromedp"
)

// The browser tests drive Debian's chromium, headless, through the Chrome
// DevTools Protocol. Set CAPGATE_CHROMIUM to use another binary, and
// CAPGATE_REQUIRE_BROWSER=1 to fail instead of skipping when there is none
// or it will not start. scripts/browser-deps.sh installs chromium.

// browserSkip skips the test (or fails it, with CAPGATE_REQUIRE_BROWSER=1)
// because no browser can run here.
func browserSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + "; install it with scripts/browser-deps.sh (apt-get install -y chromium) or set CAPGATE_CHROMIUM"
	if os.Getenv("CAPGATE_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg)
	}
	skipnote.Record("the Chromium tests", "install chromium (scripts/browser-deps.sh) or set CAPGATE_CHROMIUM")
	t.Skip(msg)
}

// chromiumPath finds the browser: CAPGATE_CHROMIUM, else chromium on PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("CAPGATE_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH")
}

// browser is one headless Chromium tab for a test, with the page's
// uncaught exceptions and security errors (such as a script blocked by
// the Content-Security-Policy) collected.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	problems []string // requires mu held
}

// startBrowser starts Chromium with a fresh profile, within ctx, and
// returns its tab. It skips the test when the browser cannot be found or
// started. The browser is closed at cleanup.
func startBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		browserSkip(t, "browser test: %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, Chromium's sandbox will not start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{ctx: bctx}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		wg.Wait()
	})
	// The first action starts the browser and ties its life to the
	// context it runs with: bctx, bounded by ctx.
	if err := chromedp.Do(bctx); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("browser test: out of time starting chromium: %v", err)
		}
		browserSkip(t, "browser test: chromium at %s did not start: %v", path, err)
	}
	msgs := chromedp.Console(bctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source == "security") {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// problemsSeen returns the exceptions and security errors seen so far.
func (b *browser) problemsSeen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
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
