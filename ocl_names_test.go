package capgate_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The built-in policy's names are data: they live in policy/ocl.yaml, not
// in the code that runs every policy. This guards that no Go source
// outside the places that are about the built-in policy itself names
// them: its tests, the test suites and benchmarks built around it, and the
// tools that simulate its API and its web client (the demo's and load
// tests' workload).
func TestNoBuiltInPolicyNamesInTheEngine(t *testing.T) {
	names := regexp.MustCompile(`\$match|\$rerank|es2_knn|X-OCL|X-Ocl|ocl_capacity`)
	// Where the built-in policy's own tooling lives, and why it may name it.
	allowed := []string{
		"bench/",                   // benchmarks of the built-in policy's calls
		"test/",                    // the integration suites, run under the built-in policy
		"lanetest/", "configtest/", // conformance suites: their calls are the built-in policy's
		"tools/simapi/simapi.go",   // the simulated API of the built-in policy
		"tools/simapi/backend.go",  // its kNN backend
		"tools/genlog/",            // logs of the built-in policy's call mix (pinned by analyze's tests)
		"loadgen/",                 // the Mapper workload (the built-in policy's web client)
		"demo/demo.go",             // the demo of the built-in policy's API
		"cmd/capgate/demoflags.go", // the demo's help: the built-in policy's API
		"cmd/capgate/loadgen.go",   // loadgen's help: the Mapper workload
		"cmd/capgate/simapi.go",    // simapi's help: the built-in policy's simulated API
		"python/",                  // the Python classifier of the built-in policy
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(path, a) {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := names.FindString(line); m != "" {
				t.Errorf("%s:%d names the built-in policy's %q: take it from the policy (policy.OCL() or the policy in force)", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
