package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/capgate/capgate/tools/simapi"
)

var screenshots = flag.Bool("screenshots", false, "write the status page's screenshots to docs/img/ (else to a temporary folder)")

// pageWait bounds each wait for the page to show something. The page
// polls every 2 s; the waits end as soon as it shows it.
const pageWait = 15 * time.Second

// TestStatusPageInChromium loads the staff status page from a real
// gateway in headless Chromium: it signs in as staff, sees the lane store
// named and the time in UTC, sees a shadow-refused call counted in the
// decisions of the last minutes, watches the api_heavy bar follow three
// calls held in flight and the full lane marked as the one calls wait on, raises a limit through
// the form and sees it in force, sees the API's validation error for a
// bad value inline, rolls back (a version, then the last change, then is
// told why a rollback of a rollback is refused), and sees a paused lane
// named as paused with whose calls it refuses.
func TestStatusPageInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	b := startBrowser(t, ctx)

	api := simapi.New(simapi.DemoUsers())
	api.Hold = make(chan struct{})
	api.Started = make(chan string, 3)
	addr, _ := startServe(t, api)
	page := addr + "/capacity/"

	// Anonymous: the shell asks for a token and shows no data.
	b.do(t, "load the page", pageWait, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#token")))
	if hidden, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.getElementById("app").hidden`)); err != nil || !hidden {
		t.Fatalf("anonymous: the data part is shown (hidden=%v, %v)", hidden, err)
	}

	// A non-staff token is refused with the API's 403.
	b.do(t, "sign in as grace", pageWait, chromedp.SendKeys(chromedp.CSS("#token"), "grace-token"+kb.Enter))
	b.waitText(t, "#login-error", "(403)", false, pageWait)

	// Staff sign in; the bars start at 0 of the default limits.
	b.do(t, "sign in as ada", pageWait, chromedp.SendKeys(chromedp.CSS("#token"), "ada-token"),
		chromedp.Click(chromedp.CSS("#login-form button")), chromedp.WaitVisible(chromedp.CSS("#lane-api_heavy")))
	b.waitText(t, "#lane-api_heavy .count", "0 / 4", true, pageWait)
	b.waitText(t, "#lane-es2_knn .count", "0 / 3", true, pageWait)
	b.waitText(t, "#mode", "shadow", true, pageWait)
	// Why: "Mode shadow enforced for aware" read as if shadow enforced
	// something; the line says who is refused now.
	b.waitText(t, "#enforcing", "· counts and refuses nobody (in enforce it would refuse capacity-aware clients only)", true, pageWait)
	if unlabelled, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("input, select, textarea"))
		.filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id)`)); err != nil || len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v (%v)", unlabelled, err)
	}

	b.waitText(t, "#store", "memory (in-process: this gateway only) · ok", true, pageWait)
	b.waitText(t, "#updated", " UTC", false, pageWait)
	b.waitText(t, "#binding", "No lane is full: no call waits.", true, pageWait)

	// Two calls of margaret (preview: one at a time) answered one after
	// the other, held until both are in: the second is shadow-refused in
	// her user lane, and the decisions of the last minutes count both.
	first := make(chan error, 2)
	for range 2 {
		go func() { first <- heavyCall(ctx, addr, "margaret-token") }()
	}
	for range 2 {
		<-api.Started
	}
	for range 2 {
		api.Hold <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
	b.waitText(t, "#dec-tier-preview .dec-admitted", "1 / 1 / 1", true, pageWait)
	b.waitText(t, "#dec-tier-preview .dec-shadow-refused", "1 / 1 / 1", true, pageWait)
	b.waitText(t, "#dec-lane-user .dec-shadow-refused", "1 / 1 / 1", true, pageWait)

	// Three heavy calls held in flight: the bar follows them, live, and
	// api_heavy's bulk limit (3) is full: the lane calls would wait on.
	done := make(chan error, 3)
	for _, user := range []string{"grace", "ken", "linus"} {
		go func() { done <- heavyCall(ctx, addr, user+"-token") }()
	}
	for range 3 {
		select {
		case <-api.Started:
		case err := <-done:
			t.Fatalf("a heavy call ended before it was held: %v", err)
		case <-ctx.Done():
			t.Fatal("the heavy calls did not reach the API")
		}
	}
	b.waitText(t, "#lane-api_heavy .count", "3 / 4", true, pageWait)
	b.waitText(t, "#users tbody", "grace", false, pageWait)
	if v, err := chromedp.Run(b.ctx, chromedp.Evaluate[float64](`document.querySelector("#lane-api_heavy meter").value`)); err != nil || v != 3 {
		t.Errorf("api_heavy meter value = %v (%v), want 3", v, err)
	}
	b.waitText(t, "#binding", "Full: api_heavy (bulk calls up to 3): 3 / 4. In shadow nothing waits; in enforce calls would wait on this lane.", true, pageWait)
	b.waitText(t, "#lane-api_heavy.binding .binding-mark", "full: enforce would make calls wait here", true, pageWait)
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr.binding").length`)); err != nil || n != 1 {
		t.Errorf("%d rows marked binding (%v), want 1", n, err)
	}
	saveScreenshot(t, b, "status-page.png")
	close(api.Hold)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	b.waitText(t, "#lane-api_heavy .count", "0 / 4", true, pageWait)
	b.waitText(t, "#binding", "No lane is full: no call waits.", true, pageWait)
	b.waitText(t, "#dec-tier-core .dec-admitted", "2 / 2 / 2", true, pageWait)

	// Raise api_heavy.cluster through the form.
	b.do(t, "change a limit", pageWait, clearField("f-api_heavy-cluster"),
		chromedp.SendKeys(chromedp.CSS("#f-api_heavy-cluster"), "6"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "more room for the test"),
		chromedp.Click(chromedp.CSS("#save")))
	b.waitText(t, "#change-result", "Saved version 1: api_heavy.cluster 4 → 6.", true, pageWait)
	b.waitText(t, "#lane-api_heavy .count", "0 / 6", true, pageWait)
	b.waitText(t, `[id="config-api_heavy.cluster"] td`, "6", true, pageWait)
	b.waitText(t, "#history tbody tr", "more room for the test", false, pageWait)

	// A bad value: the API's message is shown inline, the field marked,
	// and nothing is saved. Enter in the note submits (keyboard only).
	b.do(t, "send a bad value", pageWait, clearField("f-es2_knn"),
		chromedp.SendKeys(chromedp.CSS("#f-es2_knn"), "-1"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "a bad value"+kb.Enter))
	b.waitText(t, "#change-errors", `"es2_knn" must be a whole number from 0 to 100000.`, false, pageWait)
	state, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[document.getElementById("f-es2_knn").getAttribute("aria-invalid"),
		document.activeElement.id, String(document.getElementById("change-errors").hidden)]`))
	if err != nil || strings.Join(state, ",") != "true,change-errors,false" {
		t.Errorf("after the error: aria-invalid, focus, hidden = %v (%v); want true, change-errors, false", state, err)
	}
	saveScreenshot(t, b, "status-page-error.png")
	if v := configVersion(t, addr); v != 1 {
		t.Errorf("config version after the bad value = %d, want 1", v)
	}

	// Roll back from a history row: version 2 (made through the API)
	// raised api_heavy.cluster to 8; the row of version 1 restores 6.
	req, _ := http.NewRequest("PATCH", addr+"/capacity/config/", strings.NewReader(`{"api_heavy":{"cluster":8},"note":"more"}`))
	req.Header.Set("Authorization", "Token ada-token")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PATCH: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	b.do(t, "reload for the new history", pageWait, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#history-1 button.rollback")))
	b.do(t, "roll back to version 1", pageWait, clearField("f-note"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "8 was too many"),
		chromedp.Click(chromedp.CSS("#history-1 button.rollback")))
	b.waitText(t, "#change-result", "Saved version 3: back to version 1.", true, pageWait)
	b.waitText(t, `[id="config-api_heavy.cluster"] td`, "6", true, pageWait)
	b.waitText(t, "#history-3", "rollback to version 1", false, pageWait)

	// Roll back the last change (the button above the history). Version 3
	// is itself a rollback: rolling it back would redo version 2, and the
	// page shows why it is refused. After a change (version 4), the button
	// rolls it back to version 3's config.
	b.waitText(t, "#undo", "Roll back the last change (version 3)", true, pageWait)
	b.do(t, "roll back a rollback", pageWait, clearField("f-note"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "and back again"),
		chromedp.Click(chromedp.CSS("#undo")))
	b.waitText(t, "#change-errors li", "The last change, version 3, was itself a rollback (to version 1's config): rolling it back would bring back what it undid. To do that, roll back to version 2 by its number.", true, pageWait)
	patchConfig(t, addr, `{"es2_knn":2,"note":"less kNN"}`)
	b.do(t, "reload for the new history", pageWait, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#history-4")))
	b.waitText(t, "#undo", "Roll back the last change (version 4)", true, pageWait)
	b.do(t, "roll back the last change", pageWait, clearField("f-note"),
		chromedp.SendKeys(chromedp.CSS("#f-note"), "kNN was fine"),
		chromedp.Click(chromedp.CSS("#undo")))
	b.waitText(t, "#change-result", "Saved version 5: version 4 rolled back (to version 3's config).", true, pageWait)
	b.waitText(t, `[id="config-es2_knn"] td`, "3", true, pageWait)
	b.waitText(t, "#history-5", "rollback to version 3", false, pageWait)

	// An adaptive limit on es2_knn: advised beside the static limit, then
	// applied, then switched back (the gateway steps it every second).
	patchConfig(t, addr, `{"adaptive":{"es2_knn":{"mode":"advise","min":1,"max":8}}}`)
	b.waitText(t, "#lane-es2_knn .count", "0 / 3 · limit static, advised 3", true, pageWait)
	patchConfig(t, addr, `{"adaptive":{"es2_knn":{"mode":"apply"}}}`)
	b.waitText(t, "#lane-es2_knn .count", "0 / 3 · limit adaptive (advised 3)", true, pageWait)
	patchConfig(t, addr, `{"adaptive":null}`)
	b.waitText(t, "#lane-es2_knn .count", "0 / 3", true, pageWait)

	// The token lasts for the tab: a reload stays signed in; signing out
	// forgets it.
	b.do(t, "reload", pageWait, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#lane-api_heavy")))
	b.waitText(t, "#lane-api_heavy .count", "0 / 6", true, pageWait)

	// Why: with core users paused the page said "No lane is full: no call
	// waits."; the pause showed only as a 0 in the config table.
	patchConfig(t, addr, `{"mode":"enforce","enforce_for":"all","per_user":{"core":0},"note":"pause core"}`)
	b.do(t, "reload for the new config", pageWait, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#history-9")))
	b.waitText(t, "#paused li", "Paused: user for tier core refuses $match and $rerank calls of tier core — refused at once.", true, pageWait)
	b.waitText(t, "#enforcing", "· refuses every caller at a full lane", true, pageWait)
	b.waitText(t, "#binding", "No other lane is full: the paused lanes above refuse their calls, no call waits.", true, pageWait)
	saveScreenshot(t, b, "status-page-paused.png")
	patchConfig(t, addr, `{"mode":"shadow","note":"shadow again"}`)
	b.waitText(t, "#paused li", "— in shadow they go ahead (shadow-refused); enforce would refuse them.", false, pageWait)

	b.do(t, "sign out", pageWait, chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	if kept, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`sessionStorage.length`)); err != nil || kept != 0 {
		t.Errorf("after signing out, sessionStorage holds %d items (%v), want 0", kept, err)
	}

	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page had errors:\n%s", strings.Join(p, "\n"))
	}
}

// clearField empties the text field with the given id.
func clearField(id string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`document.getElementById(` + jsString(id) + `).value = ""`)
}

// heavyCall sends a $rerank through the gateway as the token's user.
func heavyCall(ctx context.Context, addr, token string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", addr+"/concepts/$rerank/", strings.NewReader(`{"rows":[{"a":1}],"q":"x"}`))
	if err != nil {
		return fmt.Errorf("heavy call: %w", err)
	}
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("heavy call: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("heavy call as %s: status %d", token, resp.StatusCode)
	}
	return nil
}

// patchConfig sends a PATCH of the config through the staff API as staff.
func patchConfig(t *testing.T, addr, body string) {
	t.Helper()
	req, _ := http.NewRequest("PATCH", addr+"/capacity/config/", strings.NewReader(body))
	req.Header.Set("Authorization", "Token ada-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("PATCH %s: %s %s", body, resp.Status, msg)
	}
}

// configVersion reads the version in force through the staff API.
func configVersion(t *testing.T, addr string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", addr+"/capacity/config/", nil)
	req.Header.Set("Authorization", "Token ada-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Version *int `json:"version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Version == nil {
		t.Fatalf("GET /capacity/config/: %v (version %v)", err, body.Version)
	}
	return *body.Version
}

// saveScreenshot writes a full-page PNG to docs/img/ with -screenshots,
// else to a temporary folder.
func saveScreenshot(t *testing.T, b *browser, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "..", "docs", "img")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
