package analyze_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/analyze/genlog"
)

var (
	benchLines = flag.Int("analyze.lines", 200000, "calls in the generated log of BenchmarkAnalyze")
	benchFile  = flag.String("analyze.file", "", "a log file for BenchmarkAnalyze instead of a generated one")
)

var benchLog = sync.OnceValues(func() ([]byte, error) {
	if *benchFile != "" {
		return os.ReadFile(*benchFile)
	}
	var buf bytes.Buffer
	_, err := genlog.Generate(context.Background(), &buf, genlog.Options{
		Calls: *benchLines, Rate: 100, Users: 2000, Tasks: 4, NoiseEvery: 1000, Seed: 1})
	return buf.Bytes(), err
})

// BenchmarkAnalyze analyzes a generated log (the real Gate's lines; 100
// calls/s, 2000 users, 4 gateways) and reports lines/s and the peak heap
// in use during a run (sampled after the run: HeapSys-HeapReleased bounds
// it from above).
func BenchmarkAnalyze(b *testing.B) {
	data, err := benchLog()
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Count(data, []byte{'\n'})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := analyze.Analyze(context.Background(), []analyze.Input{{Name: "bench", R: bytes.NewReader(data)}}, analyze.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if r.Lines.Events == 0 {
			b.Fatal("no events")
		}
	}
	b.StopTimer()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(ms.HeapSys-ms.HeapReleased)/(1<<20), "heap-MiB")
}
