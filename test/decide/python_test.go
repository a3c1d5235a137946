package decide

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// TestPythonClient runs the Python package's own unit tests (the client
// against stand-ins for a broken, hung or absent service); they need only
// Python ≥ 3.9, not Django.
func TestPythonClient(t *testing.T) {
	if err := exec.Command(e2e.PythonBin, "-c", "import sys; assert sys.version_info >= (3, 9)").Run(); err != nil {
		e2e.SkipOrFail(t, "python client tests: "+e2e.PythonBin+" ≥ 3.9 is missing")
	}
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), e2e.PythonBin, "-m", "unittest", "discover", "-s", filepath.Join(root, "python", "tests"))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
}
