package answer

import (
	"net/http"
	"testing"

	"github.com/capgate/capgate"
)

// The refusal path alone, under the built-in policy (capgate's own shape)
// and under a policy's template (OpenAI's shape, its detail a text
// template, Retry-After-Ms and X-Should-Retry): the 429's body as the
// decision service takes it (Refusal, a new slice) and as the gateway
// writes it (WriteRefusal, from the pooled buffer), and with its headers
// (SetGated).
// docs/BENCHMARKS.md has the numbers.
func BenchmarkRefusal(b *testing.B) {
	full, _ := shapedRefusals(b, parseShaped(b))
	admissions := testAdmissions(b)
	for _, tc := range []struct {
		name string
		adm  *capgate.Admission
	}{{"ocl", admissions[len(admissions)-1]}, {"template", full}} {
		w := discard{h: http.Header{}}
		b.Run(tc.name+"/Refusal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Refusal(tc.adm.Outcome()) // a new slice: the decision service's
			}
		})
		b.Run(tc.name+"/body", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				WriteRefusal(w, tc.adm.Outcome())
			}
		})
		b.Run(tc.name+"/headers+body", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				SetGated(w.h, tc.adm.Outcome(), "rid-1")
				WriteRefusal(w, tc.adm.Outcome())
			}
		})
	}
}
