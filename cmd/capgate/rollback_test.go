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

		// Without --to: the last change rolled back. The last change is
		// the rollback above, so rolling it back would redo what it undid:
		// refused, saying so.
		if code, _, stderr := run(t, "capacity", "rollback", "--database", db); code != 1 || !strings.Contains(stderr, "was itself a rollback") {
			t.Errorf("rollback of a rollback: exit %d, %q", code, stderr)
		}
		v4 := mustRun(t, "capacity", "set", "es2_knn=1", "--database", db)["version"]
		out = mustRun(t, "capacity", "rollback", "--note", "knn back", "--database", db)
		wantJSON(t, "rollback of the last change", out["changes"], `{"es2_knn":[1,3]}`)
		if fmt.Sprint(out["undid"]) != fmt.Sprint(v4) {
			t.Errorf("undid = %v, want %v", out["undid"], v4)
		}
		// By its number, to the config in force: said so, nothing saved.
		if code, _, stderr := run(t, "capacity", "rollback", "--to", fmt.Sprint(v1), "--database", db); code != 1 || !strings.Contains(stderr, "already in force") {
			t.Errorf("rollback to the config in force: exit %d, %q", code, stderr)
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
	if code, _ := staff("POST", "/capacity/config/rollback/", `{"version":0}`); code != http.StatusBadRequest {
		t.Errorf("rollback to version 0: %d, want 400", code)
	}
	// The same rollback again (the CLI's, then the page's): it would change
	// nothing, and the answer says so instead of 200 with no changes.
	code, out = staff("POST", "/capacity/config/rollback/", fmt.Sprintf(`{"version":%v}`, first["version"]))
	if detail, _ := out["detail"].(string); code != http.StatusConflict || !strings.Contains(detail, "already in force") {
		t.Errorf("a second rollback to the same version: %d %v; want 409, already in force", code, out)
	}
	// Without a version: the last change rolled back; the last change is a
	// rollback, so 409 with why.
	code, out = staff("POST", "/capacity/config/rollback/", `{}`)
	if detail, _ := out["detail"].(string); code != http.StatusConflict || !strings.Contains(detail, "itself a rollback") {
		t.Errorf("a rollback of a rollback: %d %v; want 409", code, out)
	}
	_, third := staff("PATCH", "/capacity/config/", `{"es2_knn":1}`)
	code, out = staff("POST", "/capacity/config/rollback/", `{"note":"knn back"}`)
	if cfg, _ := out["config"].(map[string]any); code != http.StatusOK || fmt.Sprint(out["undid"]) != fmt.Sprint(third["version"]) ||
		fmt.Sprint(cfg["es2_knn"]) != "3" {
		t.Errorf("rollback of the last change: %d %v", code, out)
	}
}
