package policy_test

import (
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// identity.unverified: anonymous (the default) or refuse; anything else is
// refused with the nearest value.
func TestUnverifiedOption(t *testing.T) {
	for _, tc := range []struct {
		line   string
		refuse bool
		err    string
	}{
		{"", false, ""},
		{"  unverified: anonymous\n", false, ""},
		{"  unverified: refuse\n", true, ""},
		{"  unverified: refuze\n", false, `identity.unverified: unknown value "refuze" (did you mean "refuse"?)`},
	} {
		text := strings.Replace(base, "  default_tier: free\n", "  default_tier: free\n"+tc.line, 1)
		p, err := policy.Parse("p.yaml", []byte(text))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v; want %s", tc.line, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case p.Identity.RefuseUnverified != tc.refuse:
			t.Errorf("%q: RefuseUnverified %v; want %v", tc.line, p.Identity.RefuseUnverified, tc.refuse)
		}
	}
}
