package policy

import (
	_ "embed"
	"sync"
)

//go:embed ocl.yaml
var oclYAML []byte

// OCLFile is the name the built-in policy goes by in messages.
const OCLFile = "policy/ocl.yaml"

var ocl = sync.OnceValue(func() *Policy {
	p, err := Parse(OCLFile, oclYAML)
	if err != nil {
		// The embedded file is checked by the package's tests; it cannot
		// fail at run time.
		panic("capgate: the built-in OCL policy does not parse: " + err.Error())
	}
	return p
})

// OCL returns the built-in policy, the OCL profile. Every call returns the
// same Policy, which nothing may change.
func OCL() *Policy { return ocl() }
