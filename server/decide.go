package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/decide"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/idempotency"
	"github.com/capgate/capgate/journal"
	"github.com/capgate/capgate/redis"
)

// DecideOptions are the decision service's own settings, shared by
// `capgate decide` and `capgate serve --decide-listen`.
type DecideOptions struct {
	Listen  string // --listen (decide) or --decide-listen (serve): unix:<path> or host:port
	Token   string // --decide-token, CAPGATE_DECIDE_TOKEN: the shared secret
	NoToken bool   // --decide-no-token, CAPGATE_DECIDE_NO_TOKEN: allow a loopback TCP address without one
	// Socket is the unix socket's mode and group (--socket-mode and
	// --socket-group; serve: --decide-socket-mode, --decide-socket-group).
	Socket decide.SocketOptions
	// MaxWaiting bounds the calls of one API task waiting at once
	// (--max-waiting; serve: --decide-max-waiting); default
	// decide.DefaultMaxWaiting, 0: no bound.
	MaxWaiting int
}

// StartDecide serves the decision protocol over gate on o.Listen until ctx
// is done or stop is called; stop ends it and waits for it (call it before
// the gate closes). rep is the process's Repeater over gate (Server.Repeater),
// shared with the gateway beside it; nil: one of the service's own. With no
// address it does nothing.
func StartDecide(ctx context.Context, o DecideOptions, gate *capgate.Gate, rep *idempotency.Repeater,
	shutdown time.Duration, logger *slog.Logger) (stop func() error, err error) {
	if o.Listen == "" {
		return func() error { return nil }, nil
	}
	if o.MaxWaiting < 0 {
		return nil, fmt.Errorf("decision service: max waiting %d: want 0 (no bound) or more", o.MaxWaiting)
	}
	ln, err := decide.Listen(o.Listen, o.Token, o.NoToken, o.Socket)
	if err != nil {
		return nil, fmt.Errorf("decision service: %w", err)
	}
	s := decide.NewServer(gate)
	s.Token, s.Logger, s.MaxWaiting = o.Token, logger, o.MaxWaiting
	if rep != nil {
		s.Repeater = rep
	}
	if rs, ok := gate.Store.(*redis.Store); ok {
		// Redis: the held calls' leases are journalled, so that once this
		// service is dead another of its task id and --listen releases
		// them; a predecessor's are released once it is proven dead, and
		// journal.DefaultHold after this one starts at the earliest: the
		// calls still running have registered again meanwhile.
		s.Journal, err = journal.Open(ctx, journal.Options{Store: rs, Group: "decide:" + gate.TaskID + ":" + o.Listen,
			Release: gate.ReleaseLeft, Hold: journal.DefaultHold, Logger: logger})
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("decision service: journal: %w", err)
		}
	}
	logger.Info("capgate decision service", "listen", o.Listen, "token", o.Token != "", "max_waiting", o.MaxWaiting)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = decide.Serve(ctx, s, ln, shutdown, logger) })
	return func() error {
		cancel()
		wg.Wait()
		if s.Journal != nil {
			// The calls have ended: goodbye (their removals written).
			if err := s.Journal.Close(context.Background()); err != nil {
				logger.Warn("capgate decision service: close the journal", "error", err)
			}
		}
		return serr
	}, nil
}

// RunDecider runs the decision service alone (capgate decide) until ctx
// is done: the same stores, gate, config watch and metrics as a Server,
// with no gateway, upstream or identity; the staff API, /metrics and the
// probes on o.AdminListen, if set. ready, if set, gets d.Listen once it
// serves, adminReady the admin address before it.
func RunDecider(ctx context.Context, o ServeOptions, d DecideOptions, stdout io.Writer, logger *slog.Logger, ready, adminReady chan<- string) error {
	var err error
	// The same stores, gate, pushes and metrics as serve (openCore), with
	// no gateway, upstream or identity.
	s := &Server{opts: o, logger: logger}
	if err := s.openCore(ctx, stdout, "decision service"); err != nil {
		s.closeStores()
		return err
	}
	reg := s.registry
	defer func() {
		if cerr := s.Close(); cerr != nil {
			logger.Warn("close", "error", cerr)
		}
	}()
	if o.StaffTokens != "" && o.AdminListen == "" {
		return errors.New("capgate decide: --staff-tokens serves the staff API on --admin-listen; set it too")
	}
	var staff http.Handler
	if o.StaffTokens != "" {
		// The staff API and page as serve has them, for the holders of the
		// static staff tokens alone: the service has no identity lookup.
		if s.staffTokens, err = loadStaffTokens(o.StaffTokens); err != nil {
			return err
		}
		h := capgatehttp.NewStaffHandler(s.Configs, s.staffTokens)
		h.Status, h.Logger, h.Health = s.Gate.Status, logger, s.Health
		staff = capgatehttp.ObserveStaff(h, s.metrics, nil)
	}
	// SIGHUP: reload the policy and the staff tokens, reopen the log file.
	defer ReloadOnHUP(ctx, s.Reload)()
	var admin net.Listener
	if o.AdminListen != "" {
		if admin, err = net.Listen("tcp", o.AdminListen); err != nil {
			return fmt.Errorf("--admin-listen: %w", err)
		}
	}
	wait, err := StartDecide(ctx, d, s.Gate, s.Repeater, o.ShutdownTimeout, logger)
	if err != nil {
		if admin != nil {
			admin.Close()
		}
		return err
	}
	if adminReady != nil && admin != nil {
		adminReady <- admin.Addr().String()
	}
	if ready != nil {
		ready <- d.Listen
	}
	// The config watch and health checks run as under serve; /metrics and
	// the probes on the admin address, if any.
	stop := s.startBackground(ctx)
	defer stop()
	var hs *http.Server
	if admin != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("GET /livez", s.Health.Livez())
		mux.Handle("GET /healthz", s.Health.Livez())
		mux.Handle("GET /readyz", s.Health.Readyz())
		if staff != nil {
			mux.Handle("/capacity/", staff)
		}
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(admin) }()
	}
	<-ctx.Done()
	err = wait()
	if hs != nil {
		_ = hs.Close()
	}
	return err
}
