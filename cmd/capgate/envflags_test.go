package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/server"
	"github.com/capgate/capgate/settings"
)

// parseServeEnv parses serve's flags args over the environment env, which
// is also what Environ lists.
func parseServeEnv(env map[string]string, args ...string) (server.ServeOptions, error) {
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	cmd := &ServeCommand{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: envOf(env),
		Environ: func() []string { return environ }}
	o, err := cmd.parse(args)
	return o.ServeOptions, err
}

// Every flag reads CAPGATE_<FLAG>: CAPGATE_MODE and CAPGATE_REDIS were
// silently ignored before.
func TestEveryFlagReadsItsVariable(t *testing.T) {
	o, err := parseServeEnv(map[string]string{
		"CAPGATE_MODE":                    "enforce",
		"CAPGATE_REDIS":                   "redis://127.0.0.1:1/3",
		"CAPGATE_CONFIG_CACHE":            "3s",
		"CAPGATE_REDIS_RETRY":             "7",
		"CAPGATE_TASK_ID":                 "t1",
		"CAPGATE_MAX_BUFFERED_BYTES":      "32MiB",
		"CAPGATE_MAX_BODY_BYTES":          "64kB",
		"CAPGATE_PUBLIC_METRICS":          "yes",
		"CAPGATE_TEST_ANYTHING":           "ignored", // the tests' own variables pass
		"CAPGATE_LOCAL_LANES":             "off",
		"CAPACITY_LIMIT_MODE":             "shadow", // the alias yields to CAPGATE_MODE
		"CAPACITY_REDIS_DEADLINE_SECONDS": "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Mode != settings.ModeEnforce || o.Redis != "redis://127.0.0.1:1/3" || o.CacheTTL != 3*time.Second ||
		o.RedisRetry != 7*time.Second || o.TaskID != "t1" || o.MaxBufferedBytes != 32<<20 ||
		o.MaxBodyBytes != 64000 || !o.PublicMetrics || o.LocalLanes || o.RedisDeadline != 2*time.Second {
		t.Errorf("options = %+v", o)
	}
	// The command line wins over the environment.
	o, err = parseServeEnv(map[string]string{"CAPGATE_TASK_ID": "env"}, "--task-id", "flag")
	if err != nil || o.TaskID != "flag" {
		t.Errorf("task id = %q, %v", o.TaskID, err)
	}
}

func TestUnknownVariableRefused(t *testing.T) {
	_, err := parseServeEnv(map[string]string{"CAPGATE_LISTN": "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "CAPGATE_LISTN") || !strings.Contains(err.Error(), "did you mean CAPGATE_LISTEN") {
		t.Errorf("err = %v", err)
	}
}

// An invalid value names the variable it came from, not the flag.
func TestEnvErrorsNameTheVariable(t *testing.T) {
	for env, want := range map[string]string{
		"CAPGATE_MAX_BODY_BYTES":   `CAPGATE_MAX_BODY_BYTES="lots"`,
		"CAPGATE_PUBLIC_METRICS":   `CAPGATE_PUBLIC_METRICS="lots"`,
		"CAPGATE_SHUTDOWN_TIMEOUT": `CAPGATE_SHUTDOWN_TIMEOUT="lots"`,
		"CAPGATE_LOG_FORMAT":       `CAPGATE_LOG_FORMAT (--log-format)`,
	} {
		_, err := parseServeEnv(map[string]string{env: "lots"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=lots: err = %v, want %q in it", env, err, want)
		}
	}
	// An error found when the server is built names it too.
	var stderr bytes.Buffer
	cmd := &ServeCommand{Stdout: &bytes.Buffer{}, Stderr: &stderr,
		Getenv: envOf(map[string]string{"CAPGATE_UPSTREAM": "ftp://x", "CAPGATE_DATABASE": "sqlite:" + t.TempDir() + "/c.db"})}
	err := cmd.Run(context.Background(), []string{"--listen", "127.0.0.1:0"})
	if err == nil || !strings.HasPrefix(err.Error(), "CAPGATE_UPSTREAM (--upstream)") {
		t.Errorf("err = %v", err)
	}
}

// Booleans and byte sizes take the usual forms, on the command line too:
// the README writes --public-metrics without a value.
func TestBoolAndByteForms(t *testing.T) {
	o, err := parseServeEnv(nil, "--public-metrics", "--max-buffered-bytes", "32MiB", "--max-body-bytes=1Ki")
	if err != nil || !o.PublicMetrics || o.MaxBufferedBytes != 32<<20 || o.MaxBodyBytes != 1024 {
		t.Errorf("options = %+v, %v", o, err)
	}
	for _, bad := range []string{"0", "-1", "1XB", "", "MiB"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
}

func TestTokensWithoutTokenIdentity(t *testing.T) {
	_, err := parseServeEnv(map[string]string{"CAPGATE_TOKENS": "/x"})
	if err == nil || !strings.Contains(err.Error(), "CAPGATE_TOKENS (--tokens) needs --identity tokens") {
		t.Errorf("env: err = %v", err)
	}
	_, err = parseServeEnv(nil, "--tokens", "/x", "--identity", "header")
	if err == nil || !strings.Contains(err.Error(), "--tokens needs --identity tokens") {
		t.Errorf("flags: err = %v", err)
	}
}

// capacity status takes every lane-store flag serve takes; its own error
// told to pass --redis-cluster, which it did not know.
func TestCapacityStatusTakesLaneFlags(t *testing.T) {
	var out, errb bytes.Buffer
	cmd := &CapacityCommand{Stdout: &out, Stderr: &errb, Getenv: envOf(nil)}
	err := cmd.Run(context.Background(), []string{"status", "--database", "sqlite:" + t.TempDir() + "/none.db",
		"--redis-cluster", closedPortT(t), "--key-layout", "cluster", "--task-id", "x", "--redis-retry", "1s"})
	if err == nil || strings.Contains(err.Error(), "flag provided but not defined") {
		t.Errorf("err = %v", err)
	}
}

func closedPortT(t *testing.T) string { return closedPort(t) }

func TestMaskSecrets(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:s3cret@h:1/x":               "http://u:xxxxx@h:1/x",
		"dial redis://:pw@127.0.0.1:6379/0 x": "dial redis://:xxxxx@127.0.0.1:6379/0 x",
		"no url here":                         "no url here",
		"http://h:1/x":                        "http://h:1/x",
	} {
		if got := maskSecrets(in); got != want {
			t.Errorf("maskSecrets(%q) = %q, want %q", in, got, want)
		}
	}
	var b bytes.Buffer
	l, _ := newLogger("json", &b)
	l.Info("up at http://a:pw@h/", "upstream", "http://a:pw@h/")
	if strings.Contains(b.String(), "pw") {
		t.Errorf("log line carries the password: %s", b.String())
	}
}
