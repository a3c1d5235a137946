package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/capgate/capgate/configtest"
	"github.com/capgate/capgate/settings"
)

// Why: there was no rollback; the history kept what changed, and undoing
// a change meant retyping the old values.
func TestCapacityRollback(t *testing.T) {
	clearLaneEnv(t)
	databases(t, func(t *testing.T, db string) {
		v1 := mustRun(t, "capacity", "set", "mode=enforce", "--database", db, "--create")["version"]
		mustRun(t, "capacity", "set", "tiers.preview=1", "wait.max_seconds=5", "--database", db)
		out := mustRun(t, "capacity", "rollback", "--to", fmt.Sprint(v1), "--note", "the preview limit hurt", "--user", "ops-1", "--database", db)
		wantJSON(t, "rollback changes", out["changes"], `{"tiers.preview":[1,2],"wait.max_seconds":[5,20]}`)
		if fmt.Sprint(out["rollback_of"]) != fmt.Sprint(v1) {
			t.Errorf("rollback_of = %v, want %v", out["rollback_of"], v1)
		}
		want := settings.Default(nil, settings.ModeShadow)
		want.Mode = settings.ModeEnforce
		show := mustRun(t, "capacity", "show", "--database", db)
		wantJSON(t, "config after the rollback", show["config"], configtest.JSON(t, want.Doc()))

		// Recorded as a change: who, why, and what it restored.
		_, hist, _ := run(t, "capacity", "history", "--limit", "1", "--database", db)
		var top map[string]any
		if err := json.Unmarshal([]byte(hist), &top); err != nil {
			t.Fatalf("history %q: %v", hist, err)
		}
		if top["created_by"] != "ops-1" || top["note"] != "the preview limit hurt" || fmt.Sprint(top["rollback_of"]) != fmt.Sprint(v1) {
			t.Errorf("history's newest entry = %v", top)
		}

		if code, _, stderr := run(t, "capacity", "rollback", "--to", "999", "--database", db); code != 1 || !strings.Contains(stderr, "no such config version") {
			t.Errorf("rollback to a missing version: exit %d, %q", code, stderr)
		}
		if code, _, _ := run(t, "capacity", "rollback", "--database", db); code != 2 {
			t.Errorf("rollback without --to: exit %d, want 2", code)
		}
	})
}

// The staff API's POST /capacity/config/rollback/.
func TestStaffRollback(t *testing.T) {
	clearLaneEnv(t)
	db := "sqlite:" + t.TempDir() + "/c.db"
	p := startServeProcess(t, nil, "--upstream", newAPI(t), "--database", db)
	staff := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, p.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Token ada-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	_, first := staff("PATCH", "/capacity/config/", `{"mode":"enforce"}`)
	staff("PATCH", "/capacity/config/", `{"mode":"off"}`)
	code, out := staff("POST", "/capacity/config/rollback/", fmt.Sprintf(`{"version":%v,"note":"off by mistake"}`, first["version"]))
	if code != http.StatusOK || fmt.Sprint(out["rollback_of"]) != fmt.Sprint(first["version"]) || out["note"] != "off by mistake" {
		t.Fatalf("rollback: %d %v", code, out)
	}
	if cfg, _ := out["config"].(map[string]any); cfg["mode"] != "enforce" {
		t.Errorf("config after the rollback: %v", out["config"])
	}
	if code, _ := staff("POST", "/capacity/config/rollback/", `{"version":999}`); code != http.StatusNotFound {
		t.Errorf("rollback to a missing version: %d, want 404", code)
	}
	if code, _ := staff("POST", "/capacity/config/rollback/", `{}`); code != http.StatusBadRequest {
		t.Errorf("rollback without a version: %d, want 400", code)
	}
}
