package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/capgate/capgate/identity"
)

// reopenFile is an append-only log file that can be reopened by path
// (SIGHUP), so logrotate can move it away and the next line goes to a new
// file. Safe for concurrent use. No lock is held across a write: a write
// blocked for good (a FIFO whose reader stalled) never holds up Reopen or
// Close, and Close unblocks it.
type reopenFile struct {
	path string
	f    atomic.Pointer[os.File]
}

func openLogFile(path string) (*reopenFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r := &reopenFile{path: path}
	r.f.Store(f)
	return r, nil
}

// Write writes p to the file in force. Only the sink's one writer
// goroutine writes, so a line never straddles a Reopen.
func (r *reopenFile) Write(p []byte) (int, error) { return r.f.Load().Write(p) }

// Reopen opens the path again and closes the old file. If the path can't
// be opened, writing goes on to the old file and the error is returned.
func (r *reopenFile) Reopen() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", r.path, err)
	}
	return r.f.Swap(f).Close()
}

func (r *reopenFile) Close() error { return r.f.Load().Close() }

// reloadingTokens is the tokens identity whose file can be read again
// (SIGHUP) without a restart. A file that fails to load keeps the tokens
// in force.
type reloadingTokens struct {
	path string
	load func(path string) (*identity.Tokens, error) // default identity.LoadTokens
	cur  atomic.Pointer[identity.Tokens]
}

var _ identity.Identifier = (*reloadingTokens)(nil)

func loadTokens(path string) (*reloadingTokens, error) {
	t := &reloadingTokens{path: path}
	return t, t.Reload()
}

// Reload reads the tokens file again.
func (t *reloadingTokens) Reload() error {
	load := t.load
	if load == nil {
		load = identity.LoadTokens
	}
	id, err := load(t.path)
	if err != nil {
		return err
	}
	t.cur.Store(id)
	return nil
}

func (t *reloadingTokens) Identify(ctx context.Context, r *http.Request) (identity.Caller, bool, error) {
	return t.cur.Load().Identify(ctx, r)
}

// Reload is what SIGHUP does: reopen the log file (--log-file), read the
// tokens file (--identity tokens), the JWKS (--identity jwt) and the policy
// (--policy) again. It logs what it did, and
// returns the errors; what failed keeps its old state.
func (s *Server) Reload() error {
	var errs []error
	if s.logFile != nil {
		if err := s.logFile.Reopen(); err != nil {
			errs = append(errs, err)
		} else {
			s.logger.Info("reopened the log file", "path", s.logFile.path)
		}
	}
	if s.tokens != nil {
		if err := s.tokens.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("reload tokens: %w", err))
		} else {
			s.logger.Info("reloaded the tokens file", "path", s.tokens.path)
		}
	}
	if s.jwks != nil {
		if err := s.jwks.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("reload the JWKS: %w", err))
		} else {
			s.logger.Info("reloaded the JWKS", "keys", s.jwks.KeyCount())
		}
	}
	if err := s.reloadPolicy(); err != nil {
		errs = append(errs, err)
	}
	if s.staffTokens != nil {
		if err := s.staffTokens.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("reload staff tokens: %w", err))
		} else {
			s.logger.Info("reloaded the staff tokens file", "path", s.staffTokens.path)
		}
	}
	if s.accessFile != nil {
		if err := s.accessFile.Reopen(); err != nil {
			errs = append(errs, err)
		} else {
			s.logger.Info("reopened the access log", "path", s.accessFile.path)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.logger.Error("reload failed; keeping what was in force", "error", err)
	}
	return err
}

// ReloadOnHUP calls reload (which logs what it did) on each SIGHUP until
// ctx is done or the returned stop is called.
func ReloadOnHUP(ctx context.Context, reload func() error) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-hup:
				_ = reload()
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// reloadPolicy reads the policy file again (--policy; nothing to do for
// the built-in policy) and puts it in force: the config service reads the
// config in force on its lanes (each setting whose key it still has keeps
// its value), and the gateway's classifier evaluates its routes. A policy
// that does not parse, or that would need a restart (another key prefix:
// the lane store's keys are laid out at start), keeps the one in force.
func (s *Server) reloadPolicy() error {
	if s.opts.PolicyFile == "" || s.policy == nil {
		return nil
	}
	p, err := s.opts.LoadPolicy()
	if err == nil {
		p, err = s.opts.tierGroups(p)
	}
	if err != nil {
		return fmt.Errorf("reload the policy: %w", err)
	}
	if s.opts.KeyPrefixOf(p) != s.opts.KeyPrefixOf(s.policy) {
		return fmt.Errorf("reload the policy: its key prefix %q is not the one in force (%q): that takes a restart",
			s.opts.KeyPrefixOf(p), s.opts.KeyPrefixOf(s.policy))
	}
	s.policy = p
	s.Configs.SetPolicy(p)
	if s.classifier != nil {
		s.classifier.SetPolicy(p)
	}
	s.logger.Info("reloaded the policy", "path", s.opts.PolicyFile, "policy", p.Name, "routes", len(p.Routes), "lanes", len(p.Lanes))
	return nil
}
