package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An empty --task-id would put every gateway on one api_heavy_task lane;
// serve refuses to start with it.
func TestServeRefusesAnEmptyTaskID(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // bounds a serve that wrongly starts
	defer cancel()
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	err := cmd.Run(ctx, []string{"--listen", "127.0.0.1:0", "--database", "sqlite:" + filepath.Join(t.TempDir(), "c.db"),
		"--upstream", "http://127.0.0.1:1", "--task-id", ""})
	if err == nil || !strings.Contains(err.Error(), "--task-id is empty") {
		t.Fatalf("serve --task-id \"\": error %v, want it to say --task-id is empty", err)
	}
}
