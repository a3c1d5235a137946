// Command clientgone measures how soon the place of a stream its client
// aborts is free, for bench/clientgone.sh: streamed chat calls of the
// inference example's policy through the real gateway to simapi's
// inference engine, each aborted by its client after 3 chunks, with the
// route's on_client_gone cancel (the example's) and hold. It prints one
// JSON object per setting: the time from the abort to the call's release
// (the gate's Observer), and to the engine stopping the call (its Ended),
// p50, p95 and max over the calls.
//
//	clientgone -policy FILE [-calls 100] [-hold-calls 3]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/capgate/capgate"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "clientgone:", err)
		os.Exit(1)
	}
}

func run() error {
	file := flag.String("policy", "examples/inference/policy.yaml", "the inference example's policy")
	calls := flag.Int("calls", 100, "aborted streams with on_client_gone cancel")
	holdCalls := flag.Int("hold-calls", 3, "aborted streams with on_client_gone hold (each runs its 9 s to the end)")
	flag.Parse()
	src, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	for _, mode := range []string{"cancel", "hold"} {
		text := string(src)
		if mode == "hold" {
			text = strings.ReplaceAll(text, "on_client_gone: cancel", "on_client_gone: hold")
		}
		p, err := policy.Parse(*file, []byte(text))
		if err != nil {
			return err
		}
		n := *calls
		if mode == "hold" {
			n = *holdCalls
		}
		res, err := measure(p, n)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		res["on_client_gone"] = mode
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
	return nil
}

// released tells the bench each call the gate released.
type released chan struct{}

func (r released) Admitted(*capgate.Admission)                 {}
func (r released) Released(*capgate.Admission)                 { r <- struct{}{} }
func (r released) StoreError(string, error)                    {}
func (r released) StoreSkipped(string)                         {}
func (r released) WaitStarted(*capgate.Admission)              {}
func (r released) WaitEnded(*capgate.Admission, time.Duration) {}

func measure(p *policy.Policy, n int) (map[string]any, error) {
	// A token every 2 ms: a call of 4000 tokens alone takes about 9 s.
	api := &simapi.Inference{Engine: &simapi.Engine{StepTime: 2 * time.Millisecond, ChunkTokens: 4}, Ended: make(chan string, 1)}
	up := httptest.NewServer(api)
	defer up.Close()
	cfg := settings.Default(p, settings.ModeEnforce)
	cfg.EnforceFor = settings.EnforceAll
	rel := make(released, 1)
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "bench")
	if err != nil {
		return nil, err
	}
	gate.Observer = rel
	ids, err := identity.NewTokens([]identity.TokenEntry{{Token: "pat-token", Username: "pat", AuthGroups: []string{"pro"}}})
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(up.URL)
	classifier := &capgatehttp.Classifier{}
	classifier.SetPolicy(p)
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: u, Gate: gate, Identify: ids, Classifier: classifier,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	front := httptest.NewServer(gw)
	defer front.Close()
	var toRelease, toStop []time.Duration
	for range n {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", front.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"large","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer pat-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		br := bufio.NewReader(resp.Body)
		for events := 0; events < 3; {
			line, err := br.ReadString('\n')
			if err != nil {
				return nil, fmt.Errorf("read the stream: %w", err)
			}
			if strings.HasPrefix(line, "data: ") {
				events++
			}
		}
		aborted := time.Now()
		resp.Body.Close()
		var stopped, freed time.Duration
		for range 2 {
			select {
			case <-rel:
				freed = time.Since(aborted)
			case <-api.Ended:
				stopped = time.Since(aborted)
			case <-time.After(30 * time.Second):
				return nil, fmt.Errorf("no release and no end 30 s after the abort")
			}
		}
		_, _ = io.Copy(io.Discard, br)
		toRelease, toStop = append(toRelease, freed), append(toStop, stopped)
	}
	return map[string]any{"calls": n, "abort_to_release_ms": stats(toRelease), "abort_to_upstream_stop_ms": stats(toStop)}, nil
}

func stats(ds []time.Duration) map[string]float64 {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return map[string]float64{"p50": ms(ds[len(ds)*50/100]), "p95": ms(ds[len(ds)*95/100]), "max": ms(ds[len(ds)-1])}
}
