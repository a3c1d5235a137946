// Package randhex makes random identifiers: lease tokens, request ids,
// instance ids and test prefixes.
package randhex

import (
	"crypto/rand"
	"encoding/hex"
)

// String returns n random bytes from crypto/rand as 2n lowercase hex
// characters. Up to 32 bytes it costs one allocation, the string's.
func String(n int) string {
	var raw [32]byte
	var out [64]byte
	r, h := raw[:], out[:]
	if n > len(raw) {
		r, h = make([]byte, n), make([]byte, 2*n)
	}
	r = r[:n]
	_, _ = rand.Read(r) // crypto/rand.Read never fails (Go 1.24+)
	return string(h[:hex.Encode(h, r)])
}
