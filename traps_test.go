package capgate_test

import (
	"strings"
	"testing"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/settings"
)

// An empty task id would give every gateway the same api_heavy_task lane:
// the per-task limit would act cluster-wide. NewGate refuses it.
func TestNewGateRefusesAnEmptyTaskID(t *testing.T) {
	cfg := settings.NewFixed(settings.Default(nil, settings.ModeEnforce))
	g, err := capgate.NewGate(memory.New(nil), cfg, nil, "")
	if err == nil || g != nil || !strings.Contains(err.Error(), "task id") {
		t.Fatalf("NewGate(task \"\") = %v, %v; want no gate and an error naming the task id", g, err)
	}
	if g, err := capgate.NewGate(memory.New(nil), cfg, nil, "task-a"); err != nil || g.TaskID != "task-a" {
		t.Fatalf("NewGate(task-a) = %+v, %v; want a gate on task-a", g, err)
	}
}
