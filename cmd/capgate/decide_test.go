package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// unixClient is an HTTP client whose every request goes to the unix
// socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
}

// startDecideCmd runs capgate decide with args and returns a function that
// stops it and returns Run's error.
func startDecideCmd(t *testing.T, args ...string) (stop func() error) {
	t.Helper()
	ready := make(chan string, 1)
	cmd := &DecideCommand{Stdout: io.Discard, Stderr: io.Discard, Ready: ready, Getenv: func(string) string { return "" }}
	_, stop = startCommand(t, "decide", ready, func(ctx context.Context) error { return cmd.Run(ctx, args) })
	return stop
}

// decideLine posts call to the service and returns the first line and the
// open response.
func decideLine(t *testing.T, c *http.Client, call string) (map[string]any, *http.Response) {
	t.Helper()
	resp, err := c.Post("http://decide/v1/calls", "application/json", strings.NewReader(call))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(line, &d); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return d, resp
}

const previewCall = `{"user":"pia","tier":"preview","endpoint":"$match","semantic":true,"rows":2,"aware":true}`

func TestDecideCommandServesTheProtocol(t *testing.T) {
	dir := t.TempDir()
	sock, lines := filepath.Join(dir, "d.sock"), filepath.Join(dir, "lines.log")
	db := "sqlite:" + filepath.Join(dir, "c.db")
	// No waiting: the second call is refused at once.
	if code := Run(t.Context(), []string{"capacity", "set", "--create", "--database", db, "mode=enforce", "wait.max_seconds=0"},
		nil, io.Discard, io.Discard); code != 0 {
		t.Fatalf("capacity set: exit %d", code)
	}
	stop := startDecideCmd(t, "--listen", "unix:"+sock, "--database", db, "--task-id", "task-a", "--log-file", lines)
	c := unixClient(sock)
	first, resp := decideLine(t, c, previewCall)
	if first["decision"] != "admitted" || first["held"] != true {
		t.Fatalf("first: %v, want admitted and held", first)
	}
	second, _ := decideLine(t, c, previewCall)
	if second["decision"] != "refused" || second["status"] != float64(429) {
		t.Fatalf("second: %v, want refused with 429 (per_user.preview 1)", second)
	}
	resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatalf("decide: %v", err)
	}
	b, err := os.ReadFile(lines)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"event":"ocl_capacity",`); n != 2 {
		t.Errorf("%d ocl_capacity lines, want 2:\n%s", n, b)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file is left after exit: %v", err)
	}
}

func TestDecideCommandNeedsATokenOnTCP(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "c.db")
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0"},
		{"--listen", "0.0.0.0:0", "--decide-no-token"},
	} {
		cmd := &DecideCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		err := cmd.Run(t.Context(), append(args, "--database", db))
		if err == nil || !strings.Contains(err.Error(), "shared secret") {
			t.Errorf("%v: %v, want a refusal for want of a token", args, err)
		}
	}
	startDecideCmd(t, "--listen", "127.0.0.1:0", "--decide-no-token", "--database", db)
	startDecideCmd(t, "--listen", "127.0.0.1:0", "--decide-token", "s3cret", "--database", db)
}

func TestServeDecideListen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	startServe(t, http.NotFoundHandler(), "--decide-listen", "unix:"+sock, "--mode", "enforce")
	d, _ := decideLine(t, unixClient(sock), previewCall)
	if d["decision"] != "admitted" {
		t.Errorf("serve --decide-listen: %v, want admitted", d)
	}
}

// TestDecideSocketFlags: --socket-mode and --socket-group make the socket
// so; bad values are usage errors naming the flag.
func TestDecideSocketFlags(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "c.db")
	sock := filepath.Join(dir, "d.sock")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket-mode", "0999"}, "octal"},
		{[]string{"--socket-mode", "u+rw"}, "octal"},
		{[]string{"--socket-group", "no-such-group-capgate"}, "no-such-group-capgate"},
		{[]string{"--max-waiting", "-1"}, "max waiting"},
	} {
		cmd := &DecideCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		err := cmd.Run(t.Context(), append(tt.args, "--listen", "unix:"+sock, "--database", db))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
	startDecideCmd(t, "--listen", "unix:"+sock, "--database", db, "--socket-mode", "0660", "--socket-group", strconv.Itoa(os.Getgid()))
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != os.Getgid() {
		t.Errorf("socket %v gid %d, want 0660 and gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid, os.Getgid())
	}
}

// TestDecideStaffAPI: with --admin-listen and --staff-tokens, decide serves
// the staff API and status page as serve does, to the staff tokens only.
func TestDecideStaffAPI(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "c.db")
	staff := filepath.Join(dir, "staff.json")
	if err := os.WriteFile(staff, []byte(`[{"token":"ops-static","username":"ops","is_staff":true}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, change := range []string{"es2_knn=2", "mode=enforce"} { // versions 1 and 2
		if code := Run(t.Context(), []string{"capacity", "set", "--create", "--database", db, change}, nil, io.Discard, io.Discard); code != 0 {
			t.Fatalf("capacity set: exit %d", code)
		}
	}
	cmd := &DecideCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	if err := cmd.Run(t.Context(), []string{"--listen", "unix:" + filepath.Join(dir, "x.sock"), "--database", db, "--staff-tokens", staff}); err == nil || !strings.Contains(err.Error(), "--admin-listen") {
		t.Errorf("--staff-tokens without --admin-listen: %v, want a usage error naming --admin-listen", err)
	}
	ready, adminReady := make(chan string, 1), make(chan string, 1)
	cmd = &DecideCommand{Stdout: io.Discard, Stderr: io.Discard, Ready: ready, AdminReady: adminReady, Getenv: func(string) string { return "" }}
	args := []string{"--listen", "unix:" + filepath.Join(dir, "d.sock"), "--database", db, "--admin-listen", "127.0.0.1:0", "--staff-tokens", staff}
	startCommand(t, "decide", ready, func(ctx context.Context) error { return cmd.Run(ctx, args) })
	admin := "http://" + <-adminReady
	code, body := get(t, admin+"/capacity/status/", "Token ops-static")
	if code != http.StatusOK || !strings.Contains(body, `"api_heavy"`) {
		t.Errorf("/capacity/status/ with a staff token: %d %s, want 200 and the lanes", code, body)
	}
	for _, path := range []string{"/capacity/config/", "/capacity/config/history/"} {
		if code, _ := get(t, admin+path, "Token ops-static"); code != http.StatusOK {
			t.Errorf("%s with a staff token: %d, want 200", path, code)
		}
		if code, _ := get(t, admin+path, "Token someone"); code != http.StatusUnauthorized {
			t.Errorf("%s with an unknown token: %d, want 401", path, code)
		}
		if code, _ := get(t, admin+path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s anonymous: %d, want 401", path, code)
		}
	}
	if code, body := get(t, admin+"/capacity/", ""); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("the status page: %d, want 200 and the page (it holds no data)", code)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", admin+"/capacity/config/rollback/", strings.NewReader(`{"version":1}`))
	req.Header.Set("Authorization", "Token ops-static")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("rollback to version 1 with a staff token: %d, want 200", resp.StatusCode)
	}
	// The config, not the defaults beside it (which say shadow too).
	code, body = get(t, admin+"/capacity/config/", "Token ops-static")
	var after struct {
		Config struct {
			Mode   string `json:"mode"`
			ES2KNN int    `json:"es2_knn"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(body), &after); code != http.StatusOK || err != nil || after.Config.Mode != "shadow" || after.Config.ES2KNN != 2 {
		t.Errorf("the config after the rollback: %d %s, want version 1's: mode shadow, es2_knn 2", code, body)
	}
}
