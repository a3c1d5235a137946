// Command headerflood measures what request headers cost a gateway's
// memory, for bench/headers.sh: it opens -conns connections to -addr at
// once, each sending a request whose headers total -bytes, and samples the
// resident memory (VmRSS) of the process -pid before, while and after.
// It prints one JSON object on stdout. Only loopback addresses are
// accepted.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "headerflood:", err)
		os.Exit(1)
	}
}

type result struct {
	Conns       int            `json:"conns"`
	HeaderBytes int            `json:"header_bytes"`
	BaselineMiB float64        `json:"baseline_mib"`
	PeakMiB     float64        `json:"peak_mib"`
	GrowthMiB   float64        `json:"growth_mib"`
	AfterMiB    float64        `json:"after_mib"` // once every connection is closed, after -settle
	AfterDelta  float64        `json:"after_delta_mib"`
	Statuses    map[string]int `json:"statuses"` // status code (or "error") -> connections
	Seconds     float64        `json:"seconds"`
}

func run() error {
	addr := flag.String("addr", "", "the gateway's host:port (loopback only)")
	pid := flag.Int("pid", 0, "the gateway's process id, whose VmRSS is sampled")
	conns := flag.Int("conns", 1000, "connections at once")
	size := flag.Int("bytes", 1<<20, "header bytes each request sends")
	settle := flag.Duration("settle", 30*time.Second, "how long after the connections close memory is watched (the lowest sample is reported)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errors.New("-addr must be a loopback address")
	}
	if *pid <= 0 {
		return errors.New("-pid is required")
	}
	base, err := rss(*pid)
	if err != nil {
		return err
	}
	var peak atomic.Int64
	peak.Store(base)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v, err := rss(*pid); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	})

	start := time.Now()
	line := "X-Pad: " + strings.Repeat("p", 8<<10-9) + "\r\n" // 8 KiB a line
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	open := make(chan net.Conn, *conns)
	for range *conns {
		wg.Go(func() {
			status := send(*addr, line, *size, open)
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	// Every request has been answered (or failed); close the connections
	// still open, then watch memory settle.
	close(open)
	for c := range open {
		c.Close()
	}
	close(stop)
	sampler.Wait()
	low := peak.Load()
	deadline := time.Now().Add(*settle)
	for time.Now().Before(deadline) {
		if v, err := rss(*pid); err == nil && v < low {
			low = v
		}
		time.Sleep(250 * time.Millisecond)
	}
	mib := func(b int64) float64 { return float64(b*10/(1<<20)) / 10 }
	return json.NewEncoder(os.Stdout).Encode(result{
		Conns: *conns, HeaderBytes: *size, BaselineMiB: mib(base), PeakMiB: mib(peak.Load()),
		GrowthMiB: mib(peak.Load() - base), AfterMiB: mib(low), AfterDelta: mib(low - base),
		Statuses: statuses, Seconds: time.Since(start).Seconds(),
	})
}

// send writes one request with size bytes of headers and reads the status;
// the connection is handed to open, to be closed once all are done.
func send(addr, line string, size int, open chan<- net.Conn) string {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "error"
	}
	open <- c
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	go func() {
		// Write while the server reads; it may answer and close early.
		w := bufio.NewWriterSize(c, 64<<10)
		fmt.Fprintf(w, "GET /concepts/ HTTP/1.1\r\nHost: x\r\n")
		for n := 0; n < size; n += len(line) {
			if _, err := io.WriteString(w, line); err != nil {
				return
			}
		}
		io.WriteString(w, "\r\n")
		w.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "error"
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// rss returns the resident memory of process pid in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}
