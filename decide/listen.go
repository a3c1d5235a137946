package decide

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// UnixPrefix marks a unix socket address: unix:/run/capgate.sock.
const UnixPrefix = "unix:"

// ErrNoToken is returned by Listen for a TCP address without a token.
var ErrNoToken = errors.New("a TCP address needs a shared secret (--decide-token); without one only a unix socket, or a loopback address with --decide-no-token, is allowed")

// SocketOptions are how Listen creates a unix socket's file.
type SocketOptions struct {
	// Mode is the socket file's permission bits (0660: the owner and the
	// group may connect); 0 leaves what the umask gives.
	Mode fs.FileMode
	// Group, if not "", is the group the socket file is given: a name or
	// a numeric id (the app's group, so its workers may connect).
	Group string
}

// ParseSocketMode parses an octal permission mode such as 0660.
func ParseSocketMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n == 0 || n > 0o777 {
		return 0, fmt.Errorf("socket mode %q: want octal permission bits such as 0660", s)
	}
	return fs.FileMode(n), nil
}

// lookupGroup returns the id of group, a name or a number.
func lookupGroup(group string) (int, error) {
	if id, err := strconv.Atoi(group); err == nil {
		if id < 0 {
			return 0, fmt.Errorf("socket group %q: a group id is 0 or more", group)
		}
		return id, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w", group, err)
	}
	id, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: id %q: %w", group, g.Gid, err)
	}
	return id, nil
}

// Listen opens the decision service's address: "unix:<path>" or
// host:port. A TCP address needs a token, unless allowNoToken is set and
// the address is loopback (127.0.0.0/8, ::1, localhost): anyone who can
// reach the port could otherwise hold every place in every lane. A unix
// socket is created with so's mode and group, atomically (listenUnix).
func Listen(addr, token string, allowNoToken bool, so SocketOptions) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		if path == "" {
			return nil, fmt.Errorf("%q: want unix:<path>", addr)
		}
		ln, err := listenUnix(path, so)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, nil
	}
	if so != (SocketOptions{}) {
		return nil, fmt.Errorf("%s: a socket mode or group is for a unix socket (unix:<path>)", addr)
	}
	if token == "" && !(allowNoToken && loopback(addr)) {
		return nil, fmt.Errorf("%s: %w", addr, ErrNoToken)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// listenUnix listens on a unix socket at path that has so's mode and group
// from the moment it exists there: it is bound in a private directory
// (0700, beside path, so on the same file system), given its mode and
// group, and renamed into place. A socket file left at path by a process
// that is gone is replaced; one that answers is an error.
func listenUnix(path string, so SocketOptions) (net.Listener, error) {
	gid := -1
	if so.Group != "" {
		id, err := lookupGroup(so.Group)
		if err != nil {
			return nil, err
		}
		gid = id
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 100*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process serves on it", path)
		}
	}
	parent := filepath.Dir(path)
	if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the socket's directory %s does not exist: create it first, writable by the service's user "+
			"(install -d -o <service user> -g <app group> -m 0750 %s; systemd: RuntimeDirectory=): %w", parent, parent, fs.ErrNotExist)
	}
	dir, err := os.MkdirTemp(parent, ".capgate-sock-")
	if err != nil {
		return nil, fmt.Errorf("make a private directory beside the socket, in %s (the service's user must be able to write there): %w", parent, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // it is unlinked at its final path (unixListener.Close)
	fail := func(err error) (net.Listener, error) {
		ul.Close()
		return nil, err
	}
	if so.Mode != 0 {
		if err := os.Chmod(tmp, so.Mode); err != nil {
			return fail(fmt.Errorf("socket mode %04o: %w", so.Mode, err))
		}
	}
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("socket group %s (gid %d): %w (the service must run as a member of the group, or as root)", so.Group, gid, err))
		}
	}
	fi, err := os.Lstat(tmp)
	if err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("move the socket into place: %w", err))
	}
	return &unixListener{UnixListener: ul, path: path, fi: fi}, nil
}

// unixListener removes its socket file when closed, as net's does for the
// path it bound.
type unixListener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo // the socket file, so that one a later process put there is left alone
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
			_ = os.Remove(l.path)
		}
	})
	return err
}

// Addr returns the socket's final path.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// loopback reports whether addr's host is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// NewHTTPServer returns the http.Server for s: headers must arrive within
// 10 s, and there is no read or write timeout, since a held call's
// connection stays open (and a read deadline would end it).
func NewHTTPServer(s *Server, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves s on ln until ctx is done, then ends the held calls, waits
// at most timeout for their handlers, and closes s.
func Serve(ctx context.Context, s *Server, ln net.Listener, timeout time.Duration, logger *slog.Logger) error {
	hs := NewHTTPServer(s, logger)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.Shutdown()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		_ = hs.Close()
	}
	s.Wait(sctx) // the calls' connections, which net/http no longer tracks
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, s.Close(sctx))
}
