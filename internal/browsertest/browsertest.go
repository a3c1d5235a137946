// Package browsertest starts headless Chromium for the tests that drive
// the status page (http's and cmd/capgate's), through the Chrome DevTools
// Protocol. CAPGATE_CHROMIUM names the browser (default: chromium on
// PATH); CAPGATE_REQUIRE_BROWSER=1 fails a test instead of skipping it
// when there is none or it will not start. scripts/browser-deps.sh
// installs Debian's chromium.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/capgate/capgate/internal/skipnote"
)

// Browser is one headless Chromium tab, with the page's uncaught
// exceptions and security errors (a script the Content-Security-Policy
// blocks) collected.
type Browser struct {
	ctx context.Context

	mu       sync.Mutex
	problems []string // requires mu held
}

// Start starts Chromium with a fresh profile within ctx and returns its
// tab; it skips the test (see the package doc) when there is no browser
// or it will not start. The browser is closed at cleanup.
func Start(t *testing.T, ctx context.Context) *Browser {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		skip(t, "browser test: %v", err)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
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
	)
	bctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{ctx: bctx}
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
		skip(t, "browser test: chromium at %s did not start: %v", path, err)
	}
	msgs := chromedp.Console(bctx)
	wg.Go(func() {
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
	})
	return b
}

// Context is the tab's context, for chromedp's actions.
func (b *Browser) Context() context.Context { return b.ctx }

// Problems returns the exceptions and security errors seen so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// skip skips the test, or fails it with CAPGATE_REQUIRE_BROWSER=1.
func skip(t *testing.T, format string, args ...any) {
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
