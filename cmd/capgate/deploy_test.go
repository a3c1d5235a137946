package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/logsink"
	"github.com/capgate/capgate/server"
)

// The deploy/ examples, relative to this package.
const (
	k8sConfigMap  = "../../deploy/kubernetes/configmap.yaml"
	k8sDeployment = "../../deploy/kubernetes/deployment.yaml"
	k8sService    = "../../deploy/kubernetes/service.yaml"
	ecsTask       = "../../deploy/ecs-task-definition.json"
)

func readDeploy(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// one returns the first submatch of re in text, failing if there is none.
func one(t *testing.T, text, what, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s: no match for %s", what, re)
	}
	return m[1]
}

// serveKnows returns the environment variables serve reads, as its help
// names them, plus those read by the shared settings.
func serveKnows(t *testing.T) map[string]bool {
	t.Helper()
	f, err := (&ServeCommand{Getenv: func(string) string { return "" }}).flags()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, name := range regexp.MustCompile(`\b(?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+`).FindAllString(f.help(""), -1) {
		known[name] = true
	}
	for _, name := range []string{"CAPGATE_REDIS_URL", "CAPGATE_DATABASE", "CAPACITY_TASK_ID", "CAPACITY_LIMIT_MODE"} {
		known[name] = true
	}
	return known
}

// graceMargin is the margin the examples keep between the time a stop may
// take (preStop, drain delay, shutdown timeout, log drain) and the kill.
const graceMargin = 5 * time.Second

// stopBudget is how long a gateway may take to exit after SIGTERM: the
// drain delay, the shutdown timeout and the log sink's drain.
func stopBudget(t *testing.T, drain, shutdown string) time.Duration {
	t.Helper()
	d, err := server.ParseDuration(drain, time.Second)
	if drain == "" {
		d, err = server.DefaultDrainDelay, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.ParseDuration(shutdown, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return d + s + logsink.DefaultDrainTimeout
}

// TestKubernetesExample keeps the manifests consistent with each other and
// with serve: the admin port everywhere, a grace period above the preStop
// sleep plus the drain, the shutdown timeout and the log drain, with
// graceMargin to spare, probes on the admin port, and only variables serve
// reads.
func TestKubernetesExample(t *testing.T) {
	cm, dep, svc := readDeploy(t, k8sConfigMap), readDeploy(t, k8sDeployment), readDeploy(t, k8sService)
	admin := one(t, cm, "configmap", `CAPGATE_ADMIN_LISTEN: "0\.0\.0\.0:(\d+)"`)
	if got := one(t, dep, "deployment", `name: admin\s+containerPort: (\d+)`); got != admin {
		t.Errorf("deployment's admin containerPort %s, want %s (CAPGATE_ADMIN_LISTEN)", got, admin)
	}
	if got := one(t, svc, "service", `name: admin\s+port: (\d+)`); got != admin {
		t.Errorf("capgate-admin Service port %s, want %s", got, admin)
	}
	if got := one(t, readDeploy(t, promConfig), "prometheus.yml", `port: (\d+)`); got != admin {
		t.Errorf("prometheus.yml scrapes port %s, want %s", got, admin)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if !regexp.MustCompile(probe + `:\s+httpGet: \{path: /(livez|readyz), port: admin\}`).MatchString(dep) {
			t.Errorf("capgate's %s is not an httpGet on the admin port", probe)
		}
	}
	budget := stopBudget(t, one(t, cm, "configmap", `CAPGATE_DRAIN_DELAY: "([^"]+)"`),
		one(t, cm, "configmap", `CAPGATE_SHUTDOWN_TIMEOUT: "([^"]+)"`))
	grace, _ := strconv.Atoi(one(t, dep, "deployment", `terminationGracePeriodSeconds: (\d+)`))
	preStop, _ := strconv.Atoi(one(t, dep, "deployment", `preStop:\s+sleep:\s+seconds: (\d+)`))
	if need := time.Duration(preStop)*time.Second + budget + graceMargin; time.Duration(grace)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %d < preStop %d s + drain, shutdown and log drain %v + margin %v = %v: calls in flight are killed",
			grace, preStop, budget, graceMargin, need)
	}
	known := serveKnows(t)
	for _, m := range regexp.MustCompile(`(?m)^\s+((?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+):`).FindAllStringSubmatch(cm, -1) {
		if !known[m[1]] {
			t.Errorf("configmap sets %s, which serve does not read", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`name: ((?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+)`).FindAllStringSubmatch(dep, -1) {
		if !known[m[1]] {
			t.Errorf("deployment sets %s, which serve does not read", m[1])
		}
	}
}

// TestECSExample: the stop timeout is above the drain delay, the shutdown
// timeout and the log drain with graceMargin to spare, the
// admin port is mapped, and every variable is one serve reads.
func TestECSExample(t *testing.T) {
	var task struct {
		ContainerDefinitions []struct {
			Name         string `json:"name"`
			StopTimeout  int    `json:"stopTimeout"`
			PortMappings []struct {
				ContainerPort int `json:"containerPort"`
			} `json:"portMappings"`
			Environment []struct{ Name, Value string } `json:"environment"`
			Secrets     []struct{ Name string }        `json:"secrets"`
		} `json:"containerDefinitions"`
	}
	if err := json.Unmarshal([]byte(readDeploy(t, ecsTask)), &task); err != nil {
		t.Fatal(err)
	}
	known := serveKnows(t)
	for _, c := range task.ContainerDefinitions {
		if c.Name != "capgate" {
			continue
		}
		env := map[string]string{}
		for _, e := range c.Environment {
			env[e.Name] = e.Value
			if !known[e.Name] {
				t.Errorf("the task sets %s, which serve does not read", e.Name)
			}
		}
		for _, s := range c.Secrets {
			if !known[s.Name] {
				t.Errorf("the task's secret %s is not a variable serve reads", s.Name)
			}
		}
		budget := stopBudget(t, env["CAPGATE_DRAIN_DELAY"], env["CAPGATE_SHUTDOWN_TIMEOUT"])
		if need := budget + graceMargin; time.Duration(c.StopTimeout)*time.Second < need {
			t.Errorf("stopTimeout %d s < drain, shutdown and log drain %v + margin %v = %v", c.StopTimeout, budget, graceMargin, need)
		}
		_, port, _ := strings.Cut(env["CAPGATE_ADMIN_LISTEN"], ":")
		mapped := false
		for _, p := range c.PortMappings {
			mapped = mapped || strconv.Itoa(p.ContainerPort) == port
		}
		if port == "" || !mapped {
			t.Errorf("CAPGATE_ADMIN_LISTEN %q: its port is not mapped", env["CAPGATE_ADMIN_LISTEN"])
		}
		return
	}
	t.Fatal("no capgate container in the task")
}
