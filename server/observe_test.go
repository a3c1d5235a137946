package server

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// The staff tokens file is reloaded on SIGHUP; a file with an entry that
// is not staff is refused, and the tokens in force stay.
func TestStaffTokensReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "staff.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	knows := func(tok *reloadingTokens, token string) bool {
		req := httptest.NewRequest("GET", "/capacity/status/", nil)
		req.Header.Set("Authorization", "Token "+token)
		c, ok, err := tok.Identify(t.Context(), req)
		return err == nil && ok && c.Staff
	}
	write(`[{"token":"a","username":"ops","is_staff":true}]`)
	tok, err := loadStaffTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	write(`[{"token":"b","username":"pam","is_staff":false}]`)
	if err := tok.Reload(); err == nil || !knows(tok, "a") {
		t.Errorf("reload of a non-staff entry: err %v, old token kept %v; want an error and a kept", err, knows(tok, "a"))
	}
	write(`[{"token":"c","username":"ops","is_staff":true}]`)
	if err := tok.Reload(); err != nil || knows(tok, "a") || !knows(tok, "c") {
		t.Errorf("reload: err %v; a known %v, c known %v; want only c", err, knows(tok, "a"), knows(tok, "c"))
	}
	write(`[{"token":"x","username":"pam"}]`)
	if _, err := loadStaffTokens(path); err == nil {
		t.Error("a staff tokens file with a non-staff entry was loaded at start")
	}
}
