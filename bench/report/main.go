// Command report turns the raw results of bench/run.sh into the generated
// part of docs/BENCHMARKS.md: medians of the rounds, ratios taken round by
// round (A and B measured back to back), the machine, the date and the
// commands. Only the text between the markers is replaced; every other
// section of the file is kept.
//
//	report -dir WORKDIR -out docs/BENCHMARKS.md
//
// WORKDIR holds results.jsonl (one {"kind", "round", "c", "target", "data"}
// object per measurement), gobench.txt (go test -bench output),
// machine.txt, commands.txt and optionally profile-*.txt.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

const (
	beginMarker = "<!-- bench/run.sh: generated from here -->"
	endMarker   = "<!-- bench/run.sh: generated up to here -->"
)

type result struct {
	Kind   string          `json:"kind"`
	Round  int             `json:"round"`
	C      int             `json:"c"`
	Target string          `json:"target"`
	Data   json.RawMessage `json:"data"`
}

func main() {
	dir := flag.String("dir", "", "the run's work directory")
	out := flag.String("out", "docs/BENCHMARKS.md", "the document to update")
	flag.Parse()
	if err := run(*dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(dir, out string) error {
	res, err := readResults(filepath.Join(dir, "results.jsonl"))
	if err != nil {
		return err
	}
	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("%s\n\n", beginMarker)
	w("## Results of the last run\n\n")
	w("Written by `bench/run.sh`; do not edit by hand (the run replaces everything between the markers).\n\n")
	if m, err := os.ReadFile(filepath.Join(dir, "machine.txt")); err == nil {
		w("### Machine\n\n```\n%s```\n\n", m)
	}
	w("Every figure is the **median of %d rounds**; a ratio is computed in each round from A and B run\n", rounds(res))
	w("back to back (A B A B), then its median is taken. The machine is shared with engineers compiling and\n")
	w("testing at the same time, so absolute figures move by tens of percent from run to run; the ratios\n")
	w("are the figures to trust.\n\n")

	targets := &bytes.Buffer{}
	storeVsRedis(&b, res, targets)
	memoryStore(&b, dir, targets)
	gateway(&b, res, dir, targets)
	scale(&b, res, targets)
	micro(&b, dir)
	profiles(&b, dir)

	var doc bytes.Buffer
	fmt.Fprintf(&doc, "### Targets (issue 6)\n\n| target | measured | met |\n|---|---|---|\n%s\n", targets)
	gen := b.Bytes()
	// The targets go right after the machine and the note on noise.
	i := bytes.Index(gen, []byte("### Lane store"))
	if i < 0 {
		i = len(gen)
	}
	var full bytes.Buffer
	full.Write(gen[:i])
	full.Write(doc.Bytes())
	full.Write(gen[i:])
	if c, err := os.ReadFile(filepath.Join(dir, "commands.txt")); err == nil {
		fmt.Fprintf(&full, "### Commands\n\nAs run (ports, temporary paths and the SHA filled in by the script):\n\n```\n%s```\n\n", c)
	}
	fmt.Fprintf(&full, "%s\n", endMarker)
	return splice(out, full.Bytes())
}

// splice replaces the generated part of the document at path with gen,
// keeping everything else; a document without markers gets gen after its
// title block, and a missing document is created.
func splice(path string, gen []byte) error {
	old, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		old = []byte("# Benchmarks\n\nHow fast capgate is, measured side by side with Redis itself and with nginx. " +
			"Run `bench/run.sh` to measure again; it rewrites the generated part below.\n\n")
	} else if err != nil {
		return err
	}
	var doc []byte
	i, j := bytes.Index(old, []byte(beginMarker)), bytes.Index(old, []byte(endMarker))
	switch {
	case i >= 0 && j > i:
		doc = append(append(append([]byte{}, old[:i]...), gen...), old[j+len(endMarker)+1:]...)
	default:
		doc = append(append(append([]byte{}, old...), '\n'), gen...)
	}
	return os.WriteFile(path, doc, 0o644)
}

func readResults(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var res []result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r result
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s: %w: %s", path, err, line)
		}
		res = append(res, r)
	}
	return res, sc.Err()
}

func rounds(res []result) int {
	n := 0
	for _, r := range res {
		n = max(n, r.Round)
	}
	return n
}

// field reads a number from a result's data.
func field(r result, name string) (float64, bool) {
	var m map[string]any
	if json.Unmarshal(r.Data, &m) != nil {
		return 0, false
	}
	switch v := m[name].(type) {
	case float64:
		return v, true
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

func str(r result, name string) string {
	var m map[string]any
	if json.Unmarshal(r.Data, &m) != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// series collects one field of the results of kind (and c, target when
// set), indexed by round.
func series(res []result, kind string, c int, target, name string) map[int]float64 {
	m := map[int]float64{}
	for _, r := range res {
		if r.Kind != kind || (c != 0 && r.C != c) || (target != "" && r.Target != target) {
			continue
		}
		if v, ok := field(r, name); ok {
			m[r.Round] = v
		}
	}
	return m
}

func values(m map[int]float64) []float64 {
	v := make([]float64, 0, len(m))
	for _, x := range m {
		v = append(v, x)
	}
	return v
}

// ratio returns the median over rounds of f(a[round], b[round]).
func ratio(a, b map[int]float64, f func(a, b float64) float64) float64 {
	var v []float64
	for r, x := range a {
		if y, ok := b[r]; ok && y != 0 {
			v = append(v, f(x, y))
		}
	}
	return median(v)
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func num(f float64) string {
	switch {
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func thousands(f float64) string {
	s := strconv.FormatFloat(f, 'f', 0, 64)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func storeVsRedis(b *bytes.Buffer, res []result, targets *bytes.Buffer) {
	if len(series(res, "store", 0, "", "pairs_per_s")) == 0 {
		return
	}
	fmt.Fprintf(b, "### Lane store cost against Redis itself (part 1)\n\n")
	fmt.Fprintf(b, "One pair = `redis.Store.Acquire` over the five lanes of a semantic `$match` + `Release`\n")
	fmt.Fprintf(b, "(`bench/storebench pairs`), against `redis-benchmark` running the same `acquire.lua` with\n")
	fmt.Fprintf(b, "`EVALSHA` on the same five keys, and a bare `PING`; same Redis, same number of connections.\n")
	fmt.Fprintf(b, "\"2 × EVALSHA\" is the physical floor of a pair: two script round trips (the release is one\n")
	fmt.Fprintf(b, "pipelined round trip of five `ZREM`s, cheaper than a script).\n\n")
	fmt.Fprintf(b, "\"go-redis alone\" sends the same commands as the store (the acquire script, then the five `ZREM`s in one pipeline)\n")
	fmt.Fprintf(b, "with a plain go-redis client: the difference between it and the store is the store's own wrapper (bounds,\n")
	fmt.Fprintf(b, "deadline, one goroutine per operation); the difference between it and redis-benchmark is the Go client.\n\n")
	fmt.Fprintf(b, "| concurrency | store pairs/s | store p50 / p99 µs | go-redis alone pairs/s | go-redis alone p50 / p99 µs | store p50 ÷ go-redis p50 | EVALSHA/s | EVALSHA p50 / p99 µs | PING/s | PING p50 / p99 µs | latency: pair p50 ÷ (2 × EVALSHA p50) | throughput: (EVALSHA/s ÷ 2) ÷ pairs/s |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var worst float64
	var worstC int
	for _, c := range []int{1, 8, 64} {
		sp := series(res, "store", c, "", "pairs_per_s")
		if len(sp) == 0 {
			continue
		}
		s50, s99 := series(res, "store", c, "", "p50_us"), series(res, "store", c, "", "p99_us")
		ep := series(res, "rb_evalsha", c, "", "rps")
		e50, e99 := series(res, "rb_evalsha", c, "", "p50_us"), series(res, "rb_evalsha", c, "", "p99_us")
		pp := series(res, "rb_ping", c, "", "rps")
		p50, p99 := series(res, "rb_ping", c, "", "p50_us"), series(res, "rb_ping", c, "", "p99_us")
		gp, g50, g99 := series(res, "goredis", c, "", "pairs_per_s"), series(res, "goredis", c, "", "p50_us"), series(res, "goredis", c, "", "p99_us")
		sg := ratio(s50, g50, func(a, b float64) float64 { return a / b })
		lat := ratio(s50, e50, func(a, b float64) float64 { return a / (2 * b) })
		thr := ratio(ep, sp, func(a, b float64) float64 { return (a / 2) / b })
		fmt.Fprintf(b, "| %d | %s | %s / %s | %s | %s / %s | %s× | %s | %s / %s | %s | %s / %s | %s× | %s× |\n", c,
			thousands(median(values(sp))), num(median(values(s50))), num(median(values(s99))),
			thousands(median(values(gp))), num(median(values(g50))), num(median(values(g99))), num(sg),
			thousands(median(values(ep))), num(median(values(e50))), num(median(values(e99))),
			thousands(median(values(pp))), num(median(values(p50))), num(median(values(p99))),
			num(lat), num(thr))
		if w := max(lat, thr); w > worst {
			worst, worstC = w, c
		}
	}
	fmt.Fprintf(b, "\n")
	for _, r := range res {
		if r.Kind == "store_default" {
			pairs, _ := field(r, "pairs_per_s")
			errs, _ := field(r, "errors")
			fmt.Fprintf(b, "With the store's **default bounds** (MaxInFlight %s, MaxQueued %s) at concurrency %d: %s pairs/s and %s errors in %s s; first error: `%s`. The table above runs the store with MaxInFlight = the concurrency.\n\n",
				str(r, "max_in_flight"), str(r, "max_queued"), r.C, thousands(pairs), thousands(errs), num(mustField(r, "seconds")), str(r, "first_error"))
		}
	}
	fmt.Fprintf(targets, "| 1. Redis store within 1.3× of two raw EVALSHA round trips | worst %s× (concurrency %d; latency and throughput ratios) | %s |\n",
		num(worst), worstC, met(worst <= 1.3))
}

func mustField(r result, name string) float64 {
	v, _ := field(r, name)
	return v
}

// goBench is one benchmark's figures over its -count runs.
type goBench struct {
	ns, bytes, allocs []float64
}

func readGoBench(path string) (map[string]*goBench, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	m := map[string]*goBench{}
	var order []string
	pkg := ""
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/capgate/capgate")
			pkg = strings.TrimPrefix(pkg, "/")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if pkg != "" {
			name = pkg + "." + name
		}
		g := m[name]
		if g == nil {
			g = &goBench{}
			m[name] = g
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				g.ns = append(g.ns, v)
			case "B/op":
				g.bytes = append(g.bytes, v)
			case "allocs/op":
				g.allocs = append(g.allocs, v)
			}
		}
	}
	return m, order
}

func memoryStore(b *bytes.Buffer, dir string, targets *bytes.Buffer) {
	m, order := readGoBench(filepath.Join(dir, "gobench-memory.txt"))
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(b, "### In-process store (part 2)\n\n")
	fmt.Fprintf(b, "`go test -bench` in `memory/`, `-cpu 1,2` (GOMAXPROCS). One op = one acquire + release pair.\n")
	fmt.Fprintf(b, "`Semantic` = the five lanes of a semantic `$match`, four shared by every goroutine and one per goroutine.\n\n")
	fmt.Fprintf(b, "| benchmark | cores | ns/pair | pairs/s | B/op | allocs/op |\n|---|---|---|---|---|---|\n")
	var oneCore, oneCore1Lane, allocs float64
	for _, name := range order {
		g := m[name]
		base, cpu := name, "1"
		if i := strings.LastIndex(name, "-"); i > 0 {
			base, cpu = name[:i], name[i+1:]
		}
		ns := median(g.ns)
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s |\n", base, cpu, num(ns), thousands(1e9/ns), num(median(g.bytes)), num(median(g.allocs)))
		allocs = max(allocs, median(g.allocs))
		if cpu == "1" && strings.Contains(base, "Semantic") {
			oneCore = 1e9 / ns
		}
		if cpu == "1" && strings.HasSuffix(base, "BenchmarkAcquireRelease") {
			oneCore1Lane = 1e9 / ns
		}
	}
	fmt.Fprintf(b, "\n")
	fmt.Fprintf(targets, "| 2. in-process store ≥ 2 M pairs/s on one core | %s pairs/s (1 lane), %s pairs/s (5 lanes, semantic) | %s |\n",
		thousands(oneCore1Lane), thousands(oneCore), met(oneCore1Lane >= 2e6))
	fmt.Fprintf(targets, "| 2. in-process store: 0 allocations in steady state | %s allocs/op at most | %s |\n", num(allocs), met(allocs == 0))
}

var targetNames = map[string]string{
	"a":   "(a) upstream direct (nginx, fixed JSON)",
	"b":   "(b) nginx proxy_pass, keepalive",
	"g":   "Go httputil.ReverseProxy alone (capgate's transport)",
	"gp":  "the same with a BufferPool",
	"c":   "(c) capgate serve, ungated path",
	"d":   "(d) capgate serve, gated semantic $match, in-process lanes",
	"e":   "(e) capgate serve, gated semantic $match, Redis lanes",
	"c32": "(c) at 32 connections",
	"e32": "(e) at 32 connections (within the Redis store's default bounds)",
	"c1":  "(c) at 1 connection",
	"d1":  "(d) at 1 connection",
	"e1":  "(e) at 1 connection",
}

func gateway(b *bytes.Buffer, res []result, dir string, targets *bytes.Buffer) {
	if len(series(res, "wrk", 0, "a", "rps")) == 0 {
		if note, err := os.ReadFile(filepath.Join(dir, "gateway-skipped.txt")); err == nil {
			fmt.Fprintf(b, "### Gateway against nginx and direct (part 3)\n\nNot measured in this run: %s\n\n", bytes.TrimSpace(note))
			fmt.Fprintf(targets, "| 3. gateway targets | not measured in this run | — |\n")
		}
		return
	}
	fmt.Fprintf(b, "### Gateway against nginx and direct (part 3)\n\n")
	fmt.Fprintf(b, "`wrk` on loopback (2 threads; 1 for one connection), every request a POST of the same small JSON body with one of\n")
	fmt.Fprintf(b, "64 users' tokens; the upstream is nginx (1 worker) returning a fixed JSON body; the proxy nginx has as many workers\n")
	fmt.Fprintf(b, "as there are cores, as capgate has threads. wrk, the upstream and the proxy share the 2 cores.\n")
	fmt.Fprintf(b, "Gated calls run in mode `shadow` so none is refused (shadow-refused calls still take their leases:\n")
	fmt.Fprintf(b, "with 64 calls in flight every lane is over its limit, so the Redis and memory work is the full path).\n\n")
	fmt.Fprintf(b, "| target | connections | requests/s | p50 µs | p99 µs | non-2xx / errors |\n|---|---|---|---|---|---|\n")
	rps := map[string]map[int]float64{}
	p50 := map[string]map[int]float64{}
	for _, t := range []string{"a", "b", "g", "gp", "c", "d", "e", "c32", "e32", "c1", "d1", "e1"} {
		rps[t] = series(res, "wrk", 0, t, "rps")
		p50[t] = series(res, "wrk", 0, t, "p50_us")
		if len(rps[t]) == 0 {
			continue
		}
		p99 := series(res, "wrk", 0, t, "p99_us")
		bad := series(res, "wrk", 0, t, "non2xx")
		errs := series(res, "wrk", 0, t, "errors")
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s / %s |\n", targetNames[t], conns(res, t), thousands(median(values(rps[t]))),
			num(median(values(p50[t]))), num(median(values(p99))), num(median(values(bad))), num(median(values(errs))))
	}
	fmt.Fprintf(b, "\n")
	for _, r := range res {
		if r.Kind == "decisions" {
			fmt.Fprintf(b, "- log of %s: %s", targetNames[r.Target], str(r, "decisions"))
			if e := str(r, "errors"); e != "" {
				fmt.Fprintf(b, "; most frequent errors: `%s`", e)
			}
			fmt.Fprintf(b, "\n")
		}
	}
	fmt.Fprintf(b, "\n")
	cb := ratio(rps["c"], rps["b"], func(c, b float64) float64 { return c / b })
	diff := func(x, y string) float64 { return ratio(p50[x], p50[y], func(a, b float64) float64 { return a - b }) }
	dc, ec, e32, dc1, ec1 := diff("d", "c"), diff("e", "c"), diff("e32", "c32"), diff("d1", "c1"), diff("e1", "c1")
	ping := median(values(series(res, "rb_ping", 64, "", "p50_us")))
	ping1 := median(values(series(res, "rb_ping", 1, "", "p50_us")))
	ev1 := median(values(series(res, "rb_evalsha", 1, "", "p50_us")))
	gb := ratio(rps["g"], rps["b"], func(g, b float64) float64 { return g / b })
	gpb := ratio(rps["gp"], rps["b"], func(g, b float64) float64 { return g / b })
	cg := ratio(rps["c"], rps["g"], func(c, g float64) float64 { return c / g })
	fmt.Fprintf(b, "Round by round, throughput: Go's ReverseProxy alone ÷ (b) %s×, with a BufferPool %s×; (c) ÷ Go's ReverseProxy alone %s×.\n\n", num(gb), num(gpb), num(cg))
	fmt.Fprintf(b, "Round by round: (c) ÷ (b) throughput %s×. p50 added by gating, one connection: (d) − (c) %s µs, (e) − (c) %s µs; "+
		"64 connections (saturated, mostly queueing): (d) − (c) %s µs, (e) − (c) %s µs; 32 connections: (e) − (c) %s µs. "+
		"A Redis round trip in the same run: PING p50 %s µs alone (%s µs under 64 connections), EVALSHA of acquire.lua p50 %s µs alone.\n\n",
		num(cb), num(dc1), num(ec1), num(dc), num(ec), num(e32), num(ping1), num(ping), num(ev1))
	if len(rps["b"]) > 0 && len(rps["c"]) > 0 {
		fmt.Fprintf(targets, "| 3. (c) ≥ 0.8× of (b)'s throughput | %s× (Go's ReverseProxy alone: %s×, with a BufferPool %s×; (c) is %s× of Go's ReverseProxy alone) | %s |\n",
			num(cb), num(gb), num(gpb), num(cg), met(cb >= 0.8))
	}
	if len(rps["d1"]) > 0 {
		fmt.Fprintf(targets, "| 3. (d) adds < 50 µs p50 over (c) | +%s µs at 1 connection (+%s µs at 64, saturated) | %s |\n", num(dc1), num(dc), met(dc1 < 50))
	}
	if len(rps["e1"]) > 0 {
		fmt.Fprintf(targets, "| 3. (e) adds ≤ two Redis round trips over (c) | +%s µs at 1 connection; two round trips of the pair = %s µs (2 × EVALSHA p50, 1 connection), %s µs (2 × PING p50) | %s |\n",
			num(ec1), num(2*ev1), num(2*ping1), met(ec1 <= 2*ev1))
	}
}

func conns(res []result, target string) int {
	for _, r := range res {
		if r.Kind == "wrk" && r.Target == target {
			return r.C
		}
	}
	return 0
}

func scale(b *bytes.Buffer, res []result, targets *bytes.Buffer) {
	var rows []result
	for _, r := range res {
		if r.Kind == "scale" {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "### Scale (part 4)\n\n")
	fmt.Fprintf(b, "N users each hold one lease in the five lanes of a semantic `$match` (so the shared lanes hold N leases and\n")
	fmt.Fprintf(b, "Redis holds N + 4 keys). Acquire = one `redis.Store.Acquire` on top of them; status = `Gate.Status`, the work\n")
	fmt.Fprintf(b, "behind `GET /capacity/status/` (two `Store.Keys` SCANs and one `Store.Count`), median of 5 calls with the\n")
	fmt.Fprintf(b, "store's default bounds (1 s deadline, 0.5 s socket timeout). `SCAN` count and script time from `INFO commandstats`.\n\n")
	fmt.Fprintf(b, "| users | acquire p50 / p99 µs | status median / worst ms | status failed | one Keys ms | one Count ms | SCANs per status | count script held Redis ms | error |\n|---|---|---|---|---|---|---|---|---|\n")
	ok100k := false
	for _, r := range rows {
		u := mustField(r, "users")
		fmt.Fprintf(b, "| %s | %s / %s | %s / %s | %s of 5 | %s | %s | %s | %s | %s |\n", thousands(u),
			num(mustField(r, "acquire_p50_us")), num(mustField(r, "acquire_p99_us")),
			num(mustField(r, "status_ms")), num(mustField(r, "status_max_ms")), thousands(mustField(r, "status_failed")),
			num(mustField(r, "keys_ms")), num(mustField(r, "count_ms")),
			thousands(mustField(r, "scan_calls")), num(mustField(r, "count_block_ms")), str(r, "status_error"))
		if u == 100000 {
			ok100k = mustField(r, "status_failed") == 0 && mustField(r, "status_max_ms") < 1000
		}
	}
	fmt.Fprintf(b, "\n")
	fmt.Fprintf(targets, "| 4. status under 1 s at 100 000 users, SCAN not KEYS | see part 4 (SCAN: yes) | %s |\n", met(ok100k))
}

func micro(b *bytes.Buffer, dir string) {
	m, order := readGoBench(filepath.Join(dir, "gobench-micro.txt"))
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(b, "### Micro-benchmarks\n\n`go test -bench` with `b.ReportAllocs()`, medians of the `-count` runs.\n\n")
	fmt.Fprintf(b, "| benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n")
	for _, name := range order {
		g := m[name]
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, num(median(g.ns)), num(median(g.bytes)), num(median(g.allocs)))
	}
	fmt.Fprintf(b, "\n")
}

func profiles(b *bytes.Buffer, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "profile-*.txt"))
	if len(files) == 0 {
		return
	}
	fmt.Fprintf(b, "### Profiles (part 5)\n\n")
	fmt.Fprintf(b, "From `http/gateway_bench_test.go`: the whole gateway in process over loopback TCP (upstream, gateway and\n")
	fmt.Fprintf(b, "64 client goroutines in one process, so the client's own work is in the totals), `d` on the in-process\n")
	fmt.Fprintf(b, "lanes, `e` on the Redis lanes with room for every call (MaxInFlight 128). capgate serve has no pprof listener.\n\n")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "profile-"), ".txt")
		fmt.Fprintf(b, "`%s`:\n\n```\n%s```\n\n", name, data)
	}
}
