package policy_test

import (
	"strings"
	"testing"

	"github.com/capgate/capgate/policy"
)

// Why: every policy without names.key_prefix kept its lanes (and its
// kept answers) under "capgate", so two APIs sharing one Redis shared
// their lanes. The default prefix now names the policy; OCL's stays.
func TestDefaultKeyPrefixNamesThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{{"t", "capgate:t"}, {"inference", "capgate:inference"}, {"api-2.v1", "capgate:api-2.v1"}} {
		text := strings.Replace(base, "name: t\n", "name: "+tc.name+"\n", 1)
		p, err := policy.Parse("p.yaml", []byte(text))
		if err != nil {
			t.Fatalf("name %q: %v", tc.name, err)
		}
		if p.Names.KeyPrefix != tc.want {
			t.Errorf("name %q: key prefix %q; want %q", tc.name, p.Names.KeyPrefix, tc.want)
		}
	}
	if got := policy.OCL().Names.KeyPrefix; got != "ocl:capacity" {
		t.Errorf("OCL's key prefix %q; want ocl:capacity, byte for byte", got)
	}
	// A key_prefix given is taken as it is.
	p, err := policy.Parse("p.yaml", []byte(base+"  key_prefix: capgate\n"))
	if err != nil || p.Names.KeyPrefix != "capgate" {
		t.Errorf("key_prefix capgate: %v, %v; want it kept", p, err)
	}
	// A name that can't be part of a key needs a key_prefix.
	spaced := strings.Replace(base, "name: t\n", "name: my api\n", 1)
	if _, err := policy.Parse("p.yaml", []byte(spaced)); err == nil || !strings.Contains(err.Error(), "key_prefix") {
		t.Errorf("name %q without key_prefix: %v; want refused, naming key_prefix", "my api", err)
	}
	if _, err := policy.Parse("p.yaml", []byte(spaced+"  key_prefix: myapi\n")); err != nil {
		t.Errorf("name %q with key_prefix: %v", "my api", err)
	}
}
