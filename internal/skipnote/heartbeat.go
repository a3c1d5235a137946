package skipnote

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// heartbeatEvery is how often a package's tests say they still run.
const heartbeatEvery = 30 * time.Second

// Heartbeat says on the terminal, every 30 s until stop is called, that
// the package's tests still run: `go test ./...` hides a package's output
// until it ends, so a package whose tests run for minutes (the gateway's
// processes, the Django suites) would leave the terminal silent. Like the
// skip lines it writes to /dev/tty, and only when go test hides the
// output; with -v, in CI (no terminal) or a pipe, it does nothing
// (scripts/test.sh prints progress there). Run calls it.
func Heartbeat() (stop func()) {
	if !flag.Parsed() {
		flag.Parse() // testing.Verbose needs it; m.Run would parse them anyway
	}
	if testing.Verbose() || isTerminal(os.Stdout) {
		return func() {}
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return func() {}
	}
	stopBeat := heartbeatTo(tty, heartbeatEvery, packagePath())
	return func() {
		stopBeat()
		_ = tty.Close()
	}
}

// heartbeatTo writes a line to w every period until stop, which waits for
// the writer to end.
func heartbeatTo(w io.Writer, every time.Duration, pkg string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	began := time.Now()
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fmt.Fprintf(w, "… %s: tests still running (%s)\n", pkg, time.Since(began).Round(time.Second))
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
