package analyze_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/capgate/capgate/analyze"
	"github.com/capgate/capgate/tools/genlog"
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

// heapPeak samples the bytes in live heap objects until stop is called,
// and returns the largest sample.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done, result := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				result <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-result }
}

// BenchmarkAnalyze analyzes a generated log (the real Gate's lines; 100
// calls/s, 2000 users, 4 gateways) held in memory, and reports lines/s and
// peak-heap-MiB: the most heap the analysis held beyond the input, sampled
// every 2 ms.
func BenchmarkAnalyze(b *testing.B) {
	data, err := benchLog()
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Count(data, []byte{'\n'})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	stop := heapPeak()
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
	peak := stop()
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(peak-min(peak, base))/(1<<20), "peak-heap-MiB")
}
