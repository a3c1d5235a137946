// Package jain holds Jain's fairness index, which loadgen's report and the
// benchmarks' drivers compute over users' shares.
package jain

// Index returns Jain's index of xs: (Σx)² / (n·Σx²), from 1/n (one x holds
// everything) to 1 (all equal); 1 for no or all-zero values.
func Index(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}
