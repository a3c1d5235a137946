package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/internal/jsonenc"
	"github.com/capgate/capgate/internal/jsontree"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
)

// Defaults of the Service.
const (
	// DefaultCacheTTL is how long a gateway keeps the config it read
	// (CAPACITY_CONFIG_CACHE_SECONDS).
	DefaultCacheTTL = 10 * time.Second
	// DefaultReadTimeout bounds the config read on the request path
	// (CAPACITY_CONFIG_READ_TIMEOUT_MS).
	DefaultReadTimeout = 500 * time.Millisecond
)

// Service is the runtime config of one process: the cached config
// for the request path (it implements settings.Source) and the one way to save
// a change (Save), so that a change saved here applies at once.
//
// Config re-reads the store at most every CacheTTL, measured from before
// the read. Only one refresh runs at a time and callers never queue behind
// it: while it runs they get the last snapshot. Only the very first read
// waits, at most ReadTimeout. A read that fails keeps the last known config
// (or the defaults) with enforce turned into shadow until a read succeeds,
// and logs a WARNING; a stored row that is invalid logs an ERROR and the
// defaults apply.
//
// Set the fields before first use; a Service is safe for concurrent
// use afterwards. Create one with NewService.
type Service struct {
	Store Store // required
	// Sink receives one <log event>_config line (the policy's log event,
	// the built-in policy's <event>_config) per saved change. Default (nil): no lines.
	Sink capgate.Sink
	// BootMode is the mode of the defaults until staff first change the
	// config (--mode, CAPACITY_LIMIT_MODE). Default (""), or an invalid
	// value: shadow.
	BootMode settings.Mode
	// CacheTTL is how long a read config is used. Default (0)
	// DefaultCacheTTL; negative: read on every call.
	CacheTTL time.Duration
	// ReadTimeout bounds each read on the request path. Default (0)
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// Now is the clock of the cache. Default time.Now.
	Now func() time.Time
	// Logger gets the warnings and errors. Default slog.Default().
	Logger *slog.Logger
	// Notifiers announce each saved change to the other processes (Redis
	// pub/sub), so it applies there at once. A store that announces its
	// own changes (PostgreSQL NOTIFY) needs none. Default: none.
	Notifiers []Notifier
	// Policy is the policy whose config this is: its lanes' limits are the
	// config's. Default (nil): the built-in policy. SetPolicy replaces it
	// once the Service is in use.
	Policy *policy.Policy

	replaced   atomic.Pointer[policy.Policy] // SetPolicy's; nil: Policy
	mu         sync.Mutex
	snap       settings.Config  // requires mu held
	hasSnap    bool             // requires mu held
	expires    time.Time        // requires mu held
	lastGood   *settings.Config // the last config read without error; requires mu held
	refreshing chan struct{}    // non-nil while a refresh runs, closed at its end; requires mu held
	gen        uint64           // bumped when a save or Invalidate makes a running refresh stale; requires mu held
	version    int64            // the version of snap, 0 for the defaults; requires mu held
	read       readState        // how the last store read went; requires mu held
}

var _ settings.Source = (*Service)(nil)

// NewService returns a service over store with the defaults of the
// given boot mode.
func NewService(store Store, bootMode settings.Mode) *Service {
	return &Service{Store: store, BootMode: bootMode}
}

// SaveResult is what Save did.
type SaveResult struct {
	// Version is the row appended, or the latest row when nothing changed
	// (nil when there is none).
	Version *Version
	// Config is the config in force after the save.
	Config settings.Config
	// Diff is what the save changed, against the config in force before
	// it; empty (never nil) when nothing changed.
	Diff settings.Diff
	// Undid is, for a Rollback of the last change, the version it
	// undid; 0 otherwise.
	Undid int64
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Service) cacheTTL() time.Duration {
	if s.CacheTTL == 0 {
		return DefaultCacheTTL
	}
	return max(s.CacheTTL, 0)
}

func (s *Service) readTimeout() time.Duration {
	if s.ReadTimeout <= 0 {
		return DefaultReadTimeout
	}
	return s.ReadTimeout
}

// Defaults returns the default config of the policy with the boot mode.
func (s *Service) Defaults() settings.Config { return settings.Default(s.policy(), s.BootMode) }

// policy returns the policy in force: SetPolicy's, else Policy (nil: the
// built-in one).
func (s *Service) policy() *policy.Policy {
	if p := s.replaced.Load(); p != nil {
		return p
	}
	return s.Policy
}

// SetPolicy makes p the policy of the config (a policy reloaded): the
// config in force is read again on p's defaults at once — each setting
// whose key p still has keeps its value — and the store is read at the
// next Config.
func (s *Service) SetPolicy(p *policy.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaced.Store(p)
	defaults := settings.Default(p, s.BootMode)
	if s.hasSnap {
		if c, err := defaults.Overlay(s.snap.Doc()); err == nil {
			s.snap = c
		} else {
			s.snap = defaults
		}
	}
	if s.lastGood != nil {
		if c, err := defaults.Overlay(s.lastGood.Doc()); err == nil {
			s.lastGood = &c
		} else {
			s.lastGood = &defaults
		}
	}
	s.gen++
	s.expires = time.Time{}
}

// Config returns the config in force for the request path. It never fails
// and waits at most ReadTimeout (only when nothing was read yet, or when
// this caller runs the refresh).
func (s *Service) Config(ctx context.Context) settings.Config {
	if s.CacheTTL < 0 {
		return s.readNow(ctx)
	}
	start := s.now()
	s.mu.Lock()
	if s.hasSnap && start.Before(s.expires) {
		c := s.snap
		s.mu.Unlock()
		return c
	}
	if done := s.refreshing; done != nil {
		if s.hasSnap {
			c := s.snap
			s.mu.Unlock()
			return c
		}
		s.mu.Unlock()
		return s.awaitFirst(ctx, done)
	}
	done := make(chan struct{})
	s.refreshing = done
	gen := s.gen
	s.mu.Unlock()
	return s.refresh(ctx, start, gen, done)
}

// awaitFirst waits for the first refresh, run by another caller, at most
// ReadTimeout.
func (s *Service) awaitFirst(ctx context.Context, done <-chan struct{}) settings.Config {
	t := time.NewTimer(s.readTimeout())
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasSnap {
		return s.snap
	}
	return s.fallbackLocked()
}

// fallbackLocked is the config of a failed read: the last known one, or
// the defaults, with enforce turned into shadow. Requires mu held.
func (s *Service) fallbackLocked() settings.Config {
	c := s.Defaults()
	if s.lastGood != nil {
		c = *s.lastGood
	}
	if c.Mode == settings.ModeEnforce {
		c.Mode = settings.ModeShadow
	}
	return c
}

// refresh reads the store, bounded by ReadTimeout, and caches what it got
// until start+CacheTTL. The read is detached from the caller's
// cancellation: it serves every caller, and its own timeout bounds it.
func (s *Service) refresh(ctx context.Context, start time.Time, gen uint64, done chan struct{}) settings.Config {
	v, c, err := s.readLatest(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		s.refreshing = nil
		close(done)
	}()
	c = s.tookLocked(v, c, err, s.gen == gen)
	if s.gen != gen {
		// A save or Invalidate happened during the read: what it read
		// may be older than what is cached now.
		if s.hasSnap {
			return s.snap
		}
		return c
	}
	s.snap, s.hasSnap, s.expires = c, true, start.Add(s.cacheTTL())
	return c
}

// readLatest reads and resolves the latest version, bounded by ReadTimeout and
// detached from the caller's cancellation (a read may serve other
// callers; its own timeout bounds it).
func (s *Service) readLatest(ctx context.Context) (*Version, settings.Config, error) {
	v, err := s.Store.LatestWithin(context.WithoutCancel(ctx), s.readTimeout())
	if err != nil {
		return nil, settings.Config{}, err
	}
	return v, s.resolve(v), nil
}

// tookLocked records a read's outcome for the probes and returns the
// config it gives: c, or after a failed read the last known config with
// enforce as shadow (logged). A good read becomes the last known config
// and version when keep is set. Requires mu held.
func (s *Service) tookLocked(v *Version, c settings.Config, err error, keep bool) settings.Config {
	s.read.done(err)
	if err != nil {
		c = s.fallbackLocked()
		s.logger().Warn("Capacity config could not be read; using the last known config, with enforce as shadow",
			slog.String("mode", string(c.Mode)), slog.Any("error", err))
		return c
	}
	if keep {
		good := c
		s.lastGood = &good
		s.version = 0
		if v != nil {
			s.version = v.ID
		}
	}
	return c
}

// readNow is Config without a cache (CacheTTL negative: "read on every
// call"): the caller reads the store itself. It never shares a read in
// flight or returns the last snapshot while one runs, as the cached path
// does: a read that began before a change would hand a caller that
// arrived after it the config before it (a waiting call's re-check, the
// adaptive loop and a new call can all be reading at once).
func (s *Service) readNow(ctx context.Context) settings.Config {
	v, c, err := s.readLatest(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	c = s.tookLocked(v, c, err, true)
	if err == nil {
		s.snap, s.hasSnap = c, true
	}
	return c
}

// Version returns the version of the config in force as this process last
// read or saved it; 0 for the defaults (or before the first read). For
// metrics.
func (s *Service) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// resolve turns a stored version into a config: the defaults overlaid with
// the keys it sets that are still known. An invalid row logs an ERROR and
// gives the defaults.
func (s *Service) resolve(v *Version) settings.Config {
	if v == nil {
		return s.Defaults()
	}
	c, err := s.Defaults().Overlay(v.Config)
	if err != nil {
		s.logger().Error(fmt.Sprintf("Capacity config version %d is invalid; using the defaults", v.ID),
			slog.Int64("version", v.ID), slog.Any("error", err))
	}
	return c
}

// setLocked makes c the config in force now and the last known one.
// Requires mu held.
func (s *Service) setLocked(c settings.Config) {
	s.gen++
	good := c
	s.snap, s.hasSnap, s.expires, s.lastGood = c, true, s.now().Add(s.cacheTTL()), &good
}

// Invalidate makes the next Config read the store. Until that read ends,
// other callers still get the last snapshot.
func (s *Service) Invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.expires = time.Time{}
}

// Current reads the latest version fresh from the store, never the cache,
// and resolves it (an invalid row logs an ERROR and gives the defaults).
// The version is nil when there is none. It returns the store's error.
func (s *Service) Current(ctx context.Context) (*Version, settings.Config, error) {
	v, err := s.Store.Latest(ctx)
	if err != nil {
		return nil, settings.Config{}, fmt.Errorf("read capacity config: %w", err)
	}
	return v, s.resolve(v), nil
}

// History returns up to limit versions, newest first. It returns the
// store's error.
func (s *Service) History(ctx context.Context, limit int) ([]Version, error) {
	vs, err := s.Store.History(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("read capacity config history: %w", err)
	}
	return vs, nil
}

// Edit is one save for Service.Save: the Patch to apply (Set), whether it
// replaces the config, and the version's record of who made it. The zero
// value changes nothing.
type Edit struct {
	// Set holds the settings to change. Nil or empty changes nothing,
	// unless Replace.
	Set settings.Patch
	// Replace merges Set onto the defaults instead of the config in force:
	// the staff API's PUT and the CLI's reset. Default (false): onto the
	// config in force, the staff API's PATCH and the CLI's set.
	Replace bool
	// By is who made the change (created_by). Default (""): unknown.
	By string
	// Source is where the change came from: SourceAPI or SourceCommand.
	// Default (""): none recorded.
	Source string
	// Note is free text kept with the version. Default (""): none.
	Note string
	// RollbackOf records the version a rollback restores (Rollback sets
	// it). Default (0): not a rollback.
	RollbackOf int64

	// rollback is set by Rollback: the version that must still be the
	// latest under the writers' lock (0: any), and a change that would
	// change nothing refused rather than answered with no changes.
	rollback *rollbackCheck
}

// Save changes the config. The change is applied (Config.Apply) to a
// fresh read of the config in force, or to the defaults with Replace,
// under the store's writers' lock, so concurrent saves never lose a
// change. Unknown keys are kept, so validation reports them. A row is
// appended only if something changed; then the change applies in this
// process at once, and one <log event>_config line goes to the Sink (a
// failing Sink logs a WARNING and never fails the save).
//
// An invalid result returns a *settings.ValidationError and appends nothing. Other
// errors are the store's.
func (s *Service) Save(ctx context.Context, change Edit) (SaveResult, error) {
	var res SaveResult
	appended, err := s.Store.Update(ctx, func(latest *Version) (*Version, error) {
		if err := change.rollback.before(latest); err != nil {
			return nil, err
		}
		current := s.resolve(latest)
		base := current
		if change.Replace {
			base = s.Defaults()
		}
		next, changes, err := base.Apply(change.Set)
		if err != nil {
			return nil, err
		}
		if change.Replace {
			changes = diff(current, next)
		}
		res = SaveResult{Version: latest, Config: next, Diff: changes}
		if len(changes) == 0 {
			return nil, change.rollback.unchanged(latest)
		}
		return &Version{Config: next.Doc(), PreviousConfig: current.Doc(), CreatedBy: change.By,
			Source: change.Source, Note: change.Note, RollbackOf: change.RollbackOf}, nil
	})
	if err != nil {
		var verr *settings.ValidationError
		if errors.As(err, &verr) {
			return SaveResult{}, verr
		}
		if rerr, ok := errors.AsType[*RollbackError](err); ok {
			return SaveResult{}, rerr
		}
		return SaveResult{}, fmt.Errorf("save capacity config: %w", err)
	}
	if res.Diff == nil {
		res.Diff = settings.Diff{}
	}
	s.mu.Lock()
	s.setLocked(res.Config)
	switch {
	case appended != nil:
		s.version = appended.ID
	case res.Version != nil:
		s.version = res.Version.ID
	}
	s.mu.Unlock()
	if appended != nil {
		res.Version = appended
		s.emit(appended, res)
		s.notify(ctx, appended.ID)
	}
	return res, nil
}

// diff returns what differs from c to next (a Replace's Diff: against the
// config in force, not the defaults it was applied to).
func diff(c, next settings.Config) settings.Diff {
	return settings.Diff(jsontree.Diff(c.Doc(), next.Doc()))
}

// configLine is the <log event>_config log line; empty fields are dropped.
type configLine struct {
	Event     string        `json:"event"`
	Version   int64         `json:"version"`
	ChangedBy string        `json:"changed_by,omitempty"`
	Source    string        `json:"source,omitempty"`
	Note      string        `json:"note,omitempty"`
	Diff      settings.Diff `json:"changes,omitempty"`
	Mode      settings.Mode `json:"mode,omitempty"`
	// RollbackOf is the version a rollback restored.
	RollbackOf int64 `json:"rollback_of,omitempty"`
}

// emit writes the change's log line; a failure only logs a WARNING.
func (s *Service) emit(v *Version, res SaveResult) {
	if s.Sink == nil {
		return
	}
	line, err := jsonenc.Marshal(configLine{
		Event: s.logEvent() + "_config", Version: v.ID, ChangedBy: v.CreatedBy, Source: v.Source,
		Note: v.Note, Diff: res.Diff, Mode: res.Config.Mode, RollbackOf: v.RollbackOf,
	})
	if err == nil {
		err = s.Sink.Emit(line)
	}
	if err != nil {
		s.logger().Warn(fmt.Sprintf("Capacity config version %d was saved, but its log line failed: %v", v.ID, err),
			slog.Int64("version", v.ID))
	}
}

// logEvent returns the policy's log event.
func (s *Service) logEvent() string {
	p := s.policy()
	if p == nil {
		p = policy.OCL()
	}
	return p.Names.LogEvent
}
