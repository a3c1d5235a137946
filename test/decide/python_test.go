package decide

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonClient runs the Python package's own unit tests (the client
// against stand-ins for a broken, hung or absent service); they need only
// Python ≥ 3.9, not Django.
func TestPythonClient(t *testing.T) {
	if err := exec.Command(pythonBin, "-c", "import sys; assert sys.version_info >= (3, 9)").Run(); err != nil {
		msg := "python client tests: " + pythonBin + " ≥ 3.9 is missing"
		if os.Getenv("CAPGATE_REQUIRE_BYPASS") == "1" {
			t.Fatal(msg + "; CAPGATE_REQUIRE_BYPASS=1")
		}
		t.Skip(msg)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), pythonBin, "-m", "unittest", "discover", "-s", filepath.Join(root, "python", "tests"))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
}
