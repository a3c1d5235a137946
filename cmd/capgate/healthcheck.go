package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// healthcheckTimeout bounds `capgate healthcheck`.
const healthcheckTimeout = 3 * time.Second

// HealthcheckCommand is `capgate healthcheck [URL]`: a probe for images
// with no curl (the scratch image's HEALTHCHECK). It exits 0 when URL
// answers 200, else 1.
type HealthcheckCommand struct {
	Stdout, Stderr io.Writer
	// Getenv reads CAPGATE_ADMIN_LISTEN and CAPGATE_LISTEN. Default
	// os.Getenv.
	Getenv func(string) string
}

// Usage returns the command's help.
func (c *HealthcheckCommand) Usage() string {
	return `Usage: capgate healthcheck [URL]

Fetches URL (default: /livez on the address of CAPGATE_ADMIN_LISTEN if set,
else CAPGATE_LISTEN, else 127.0.0.1:8080; a 0.0.0.0 or [::] host is asked on
loopback) and exits 0 if
it answers 200 within 3 s, else 1. For container health checks where there is
no curl.
`
}

// Run probes once.
func (c *HealthcheckCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capgate healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(c.Stdout, c.Usage())
			return nil
		}
		return &UsageError{Msg: fmt.Sprintf("%v\n\n%s", err, c.Usage())}
	}
	if fs.NArg() > 1 {
		return &UsageError{Msg: c.Usage()}
	}
	url := fs.Arg(0)
	if url == "" {
		getenv := c.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		// With an admin listener the probes are served only there; on
		// --listen /livez would reach the API.
		listen := getenv("CAPGATE_ADMIN_LISTEN")
		if listen == "" {
			listen = getenv("CAPGATE_LISTEN")
		}
		url = "http://" + probeAddr(listen) + "/livez"
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
	}
	return nil
}

// probeAddr turns a listen address into one to probe: an unspecified host
// becomes loopback; empty is the default listen address.
func probeAddr(listen string) string {
	if listen == "" {
		return "127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
