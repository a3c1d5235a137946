package server

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/logsink"
)

// The observability settings of serve (docs/OPERATIONS.md).
type ObserveOptions struct {
	MetricsToken string // --metrics-token, CAPGATE_METRICS_TOKEN: a static bearer token for /metrics
	StaffTokens  string // --staff-tokens, CAPGATE_STAFF_TOKENS: a file of static staff tokens
	AccessLog    string // --access-log, CAPGATE_ACCESS_LOG: a file for one JSON line per request
}

// SecretFlags are the flags whose values are never logged.
var SecretFlags = map[string]bool{"metrics-token": true}

// revision is the VCS revision this binary was built from, "" if unknown.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// loadStaffTokens reads a --staff-tokens file: the --tokens format, every
// entry staff. Reloaded on SIGHUP.
func loadStaffTokens(path string) (*reloadingTokens, error) {
	t := &reloadingTokens{path: path, load: func(path string) (*identity.Tokens, error) {
		entries, err := identity.ReadTokens(path)
		if err != nil {
			return nil, err
		}
		return identity.NewStaffTokens(entries)
	}}
	if err := t.Reload(); err != nil {
		return nil, fmt.Errorf("--staff-tokens: %w", err)
	}
	return t, nil
}

// openAccessLog opens the --access-log file (appended, reopened on SIGHUP)
// behind its own bounded sink, so a slow disk never holds up a request.
func (s *Server) openAccessLog(path string) (*logsink.Sink, error) {
	f, err := openLogFile(path)
	if err != nil {
		return nil, fmt.Errorf("--access-log: %w", err)
	}
	s.closers = append(s.closers, f.Close)
	s.accessFile = f
	sink := logsink.New(f)
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), logsink.DefaultDrainTimeout)
		defer cancel()
		return sink.Close(ctx)
	})
	return sink, nil
}
