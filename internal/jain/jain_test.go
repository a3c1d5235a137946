package jain_test

import (
	"testing"

	"github.com/capgate/capgate/internal/jain"
)

func TestIndex(t *testing.T) {
	cases := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{3, 1}, 0.8},
		{nil, 1},
		{[]float64{0, 0}, 1},
	}
	for _, c := range cases {
		if got := jain.Index(c.xs); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("Index(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
