//go:build faults

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// proc is one process the suite started, in its own process group so that
// it and everything it forks can be signalled and killed together.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer // stdout and stderr, last 64 KiB, when not redirected
	done chan struct{}
	err  error // set before done is closed
	// meant is set when the suite itself stops or kills the process; an
	// exit without it was caused from outside (or by a crash).
	meant atomic.Bool
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if n := len(b.buf) - 64<<10; n > 0 {
		b.buf = append([]byte(nil), b.buf[n:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// startProc starts cmd in a new process group and registers a cleanup that
// kills the group. Unless cmd.Stdout/Stderr are set, output goes to a tail
// buffer shown when the test fails.
func startProc(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if cmd.Stdout == nil && cmd.Stderr == nil {
		p.out = &tailBuffer{}
		cmd.Stdout, cmd.Stderr = p.out, p.out
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.exited() && !p.meant.Load() {
			t.Errorf("%s ended though the suite did not stop it (%v): it crashed, or something outside the suite signalled it (a broad pkill or killall on this machine?)",
				name, p.err)
		}
		p.kill()
		if t.Failed() && p.out != nil {
			t.Logf("output of %s (tail):\n%s", name, lastLines(p.out.String(), 30))
		}
	})
	return p
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		p.meant.Store(true)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s %v: %w", p.name, sig, err)
	}
	return nil
}

// kill kills the process group with SIGKILL and waits (at most 5 s) for
// the process to be reaped. Safe to call more than once.
func (p *proc) kill() {
	p.meant.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	p, err := sparePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sparePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func sparePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cond every step until it returns nil or timeout passes,
// and returns how long it took, or the last error.
func waitFor(ctx context.Context, timeout, step time.Duration, cond func() error) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := cond()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), errors.Join(ctx.Err(), err)
		case <-time.After(step):
		}
	}
}

// run runs a short command and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(lastLines(out.String(), 10)))
	}
	return out.String(), nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// envWith returns the environment with kv (KEY=VALUE) set.
func envWith(kv ...string) []string {
	env := os.Environ()
	return append(env, kv...)
}
