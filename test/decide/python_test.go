package decide

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/capgate/capgate/test/internal/e2e"
)

// TestPythonClient runs the Python package's own client tests (the client
// against stand-ins for a broken, hung or absent service) with pytest; the
// whole Python suite (middleware, per-view gate, Django's test client) is
// .ci/run's, with pytest-django.
func TestPythonClient(t *testing.T) {
	if err := exec.Command(e2e.PythonBin, "-c", "import sys, pytest, pytest_django; assert sys.version_info >= (3, 9)").Run(); err != nil {
		e2e.SkipOrFail(t, "python client tests: "+e2e.PythonBin+" ≥ 3.9 with pytest and pytest-django is missing (scripts/python-deps.sh)")
	}
	root, err := e2e.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), e2e.PythonBin, "-m", "pytest", "-q", "tests/test_client.py")
	cmd.Dir = filepath.Join(root, "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python -m pytest tests/test_client.py: %v\n%s", err, out)
	}
}
