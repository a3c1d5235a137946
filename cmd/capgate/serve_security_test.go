package main

import (
	"io"
	"strings"
	"testing"

	capgatehttp "github.com/capgate/capgate/http"
)

func TestServeSecuritySettings(t *testing.T) {
	env := map[string]string{"CAPGATE_UPSTREAM": "http://127.0.0.1:9"}
	cmd := &ServeCommand{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}
	o, err := cmd.parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxBufferedBytes != capgatehttp.DefaultMaxBufferedBytes || o.UpgradePaths != "" || o.PublicMetrics {
		t.Errorf("defaults: buffered %d, upgrades %q, public metrics %v", o.MaxBufferedBytes, o.UpgradePaths, o.PublicMetrics)
	}
	env["CAPGATE_MAX_BUFFERED_BYTES"], env["CAPGATE_UPGRADE_PATHS"], env["CAPGATE_PUBLIC_METRICS"] = "1024", "/ws/", "true"
	if o, err = cmd.parse(nil); err != nil || o.MaxBufferedBytes != 1024 || o.UpgradePaths != "/ws/" || !o.PublicMetrics {
		t.Errorf("from the environment: %+v %v", o, err)
	}
	for _, args := range [][]string{{"--max-buffered-bytes", "0"}, {"--public-metrics", "maybe"}} {
		if _, err := cmd.parse(args); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: error %v, want one naming %s", args, err, args[0])
		}
	}
}
