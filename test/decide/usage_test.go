package decide

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/randhex"
	"github.com/capgate/capgate/test/internal/e2e"
)

// TestPythonReleaseWithUsage: the Python client's Decision.release(usage=N)
// against the real `capgate decide`: the call is released at once and its
// line carries what it used.
func TestPythonReleaseWithUsage(t *testing.T) {
	r := suite.Get(t)
	h := r.hosts[0]
	rid := randhex.String(16)
	script := `
import sys, capgate
client = capgate.Client(sys.argv[1], timeout=5)
with client.call(user="stan", is_staff=True, endpoint="$match", semantic=True, rows=1, request_id=sys.argv[2]) as d:
    assert d.decision == "admitted" and d.held, d
    d.release(usage=777)
    print(d.decision)
`
	cmd := exec.CommandContext(t.Context(), e2e.PythonBin, "-c", script, "unix:"+h.sock, rid)
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(r.root, "python"), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, l := range e2e.ReadLines[map[string]any](t, h.logFile) {
			if l["cid"] == rid {
				if l["usage"] != 777.0 || l["decision"] != "admitted" {
					t.Fatalf("the call's line %v; want admitted, usage 777", l)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line of cid %s in %s within 10 s", rid, h.logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
