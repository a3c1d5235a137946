package main

import (
	"encoding/json"
	"flag"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/decide"
	"github.com/capgate/capgate/server"
)

// The decision service's deploy/ examples, relative to this package.
const (
	k8sDecide  = "../../deploy/kubernetes/decide-sidecar.yaml"
	ecsDecide  = "../../deploy/ecs-decide-task-definition.json"
	composeYML = "../../deploy/compose.yaml"
)

// decideKnows returns the environment variables `capgate decide` reads:
// each flag's CAPGATE_<FLAG> and aliases, and those its help names.
func decideKnows(t *testing.T) map[string]bool {
	t.Helper()
	f, err := (&DecideCommand{Getenv: func(string) string { return "" }}).flags()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	f.fs.VisitAll(func(fl *flag.Flag) {
		known[envName(fl.Name)] = true
		for _, a := range envAliases[fl.Name] {
			known[a] = true
		}
	})
	for _, name := range regexp.MustCompile(`\b(?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+`).FindAllString(helpOf((&DecideCommand{}).Usage(), f.fs), -1) {
		known[name] = true
	}
	for _, name := range envExtra {
		known[name] = true
	}
	return known
}

// checkSocket checks a decision service's socket settings: a unix
// address, a valid mode that lets the group connect, and the group wanted.
func checkSocket(t *testing.T, what, listen, mode, group, wantGroup string) (dir string) {
	t.Helper()
	sock, ok := strings.CutPrefix(listen, decide.UnixPrefix)
	if !ok || !strings.HasPrefix(sock, "/") {
		t.Fatalf("%s: CAPGATE_DECIDE_LISTEN %q, want unix:/<path>", what, listen)
	}
	m, err := decide.ParseSocketMode(mode)
	if err != nil || m&0o060 != 0o060 {
		t.Errorf("%s: CAPGATE_SOCKET_MODE %q (%v): want a mode the group may read and write, such as 0660", what, mode, err)
	}
	if group != wantGroup {
		t.Errorf("%s: CAPGATE_SOCKET_GROUP %q, want %q (the group the app runs with)", what, group, wantGroup)
	}
	return path.Dir(sock)
}

// TestKubernetesDecideSidecar: the socket on an emptyDir mounted in both
// containers, its group the pod's fsGroup, the app pointed at it, probes on
// the admin port, a grace period above the shutdown timeout, fewer waiters
// than workers, and only variables decide reads.
func TestKubernetesDecideSidecar(t *testing.T) {
	y := readDeploy(t, k8sDecide)
	sidecar, app, ok := strings.Cut(y, "\n      containers:\n")
	if !ok || !strings.Contains(sidecar, "initContainers:") || !regexp.MustCompile(`restartPolicy: Always`).MatchString(sidecar) {
		t.Fatal("want capgate decide as a native sidecar (an init container with restartPolicy Always) before the containers")
	}
	env := func(text, name string) string {
		return one(t, text, name, `name: `+name+`\s+value: "([^"]*)"`)
	}
	listen := env(sidecar, "CAPGATE_DECIDE_LISTEN")
	dir := checkSocket(t, "sidecar", listen, env(sidecar, "CAPGATE_SOCKET_MODE"), env(sidecar, "CAPGATE_SOCKET_GROUP"),
		one(t, y, "pod", `fsGroup: (\d+)`))
	if got := env(app, "CAPGATE_URL"); got != listen {
		t.Errorf("the app's CAPGATE_URL %q, want the sidecar's socket %q", got, listen)
	}
	vol := one(t, y, "volumes", `- name: (\S+)\s+emptyDir: \{\}`)
	mount := regexp.MustCompile(`- name: ` + regexp.QuoteMeta(vol) + `\s+mountPath: (\S+)`)
	for what, text := range map[string]string{"sidecar": sidecar, "app": app} {
		m := mount.FindStringSubmatch(text)
		if m == nil || m[1] != dir {
			t.Errorf("%s: the emptyDir %s is not mounted at %s, the socket's directory", what, vol, dir)
		}
	}
	_, port, _ := strings.Cut(env(sidecar, "CAPGATE_ADMIN_LISTEN"), ":")
	if got := one(t, sidecar, "sidecar", `name: admin\s+containerPort: (\d+)`); got != port {
		t.Errorf("the sidecar's admin containerPort %s, want %s (CAPGATE_ADMIN_LISTEN)", got, port)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if !regexp.MustCompile(probe + `:\s+httpGet: \{path: /(livez|readyz), port: admin\}`).MatchString(sidecar) {
			t.Errorf("the sidecar's %s is not an httpGet on the admin port", probe)
		}
	}
	shutdown, err := server.ParseDuration(env(sidecar, "CAPGATE_SHUTDOWN_TIMEOUT"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	grace, _ := strconv.Atoi(one(t, y, "pod", `terminationGracePeriodSeconds: (\d+)`))
	if time.Duration(grace)*time.Second <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %d ≤ the shutdown timeout %v", grace, shutdown)
	}
	checkWaiters(t, "kubernetes", env(sidecar, "CAPGATE_MAX_WAITING"), env(app, "GUNICORN_CMD_ARGS"))
	known := decideKnows(t)
	for _, m := range regexp.MustCompile(`name: ((?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+)`).FindAllStringSubmatch(sidecar, -1) {
		if !known[m[1]] {
			t.Errorf("the sidecar sets %s, which decide does not read", m[1])
		}
	}
}

// checkWaiters: --max-waiting leaves workers free (below gunicorn's
// --workers).
func checkWaiters(t *testing.T, what, maxWaiting, gunicornArgs string) {
	t.Helper()
	n, err := strconv.Atoi(maxWaiting)
	workers, _ := strconv.Atoi(one(t, gunicornArgs, what, `--workers (\d+)`))
	if err != nil || n < 1 || n >= workers {
		t.Errorf("%s: CAPGATE_MAX_WAITING %q with %d workers: want 1 to %d, so waiting calls never take every worker", what, maxWaiting, workers, workers-1)
	}
}

// TestECSDecideExample: the socket on a task volume mounted in the app and
// the service, the group the app's and the service's, the app waiting for a
// healthy service, the admin port mapped, and only variables decide reads.
func TestECSDecideExample(t *testing.T) {
	type container struct {
		Name        string `json:"name"`
		User        string `json:"user"`
		StopTimeout int    `json:"stopTimeout"`
		Essential   bool   `json:"essential"`
		Ports       []struct {
			ContainerPort int `json:"containerPort"`
		} `json:"portMappings"`
		Environment []struct{ Name, Value string } `json:"environment"`
		Secrets     []struct{ Name string }        `json:"secrets"`
		MountPoints []struct {
			SourceVolume  string `json:"sourceVolume"`
			ContainerPath string `json:"containerPath"`
		} `json:"mountPoints"`
		DependsOn []struct{ ContainerName, Condition string } `json:"dependsOn"`
	}
	var task struct {
		Volumes    []struct{ Name string } `json:"volumes"`
		Containers []container             `json:"containerDefinitions"`
	}
	if err := json.Unmarshal([]byte(readDeploy(t, ecsDecide)), &task); err != nil {
		t.Fatal(err)
	}
	byName := map[string]container{}
	for _, c := range task.Containers {
		byName[c.Name] = c
	}
	svc, app := byName["capgate-decide"], byName["api"]
	if svc.Name == "" || app.Name == "" {
		t.Fatal("want the containers api and capgate-decide")
	}
	envOf := func(c container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Environment {
			m[e.Name] = e.Value
		}
		return m
	}
	se, ae := envOf(svc), envOf(app)
	_, appGroup, _ := strings.Cut(app.User, ":")
	dir := checkSocket(t, "capgate-decide", se["CAPGATE_DECIDE_LISTEN"], se["CAPGATE_SOCKET_MODE"], se["CAPGATE_SOCKET_GROUP"], appGroup)
	if _, g, _ := strings.Cut(svc.User, ":"); g != appGroup {
		t.Errorf("capgate-decide runs as %q: its group must be the socket's (%s) to give it", svc.User, appGroup)
	}
	if ae["CAPGATE_URL"] != se["CAPGATE_DECIDE_LISTEN"] {
		t.Errorf("the app's CAPGATE_URL %q, want %q", ae["CAPGATE_URL"], se["CAPGATE_DECIDE_LISTEN"])
	}
	vols := map[string]bool{}
	for _, v := range task.Volumes {
		vols[v.Name] = true
	}
	for _, c := range []container{svc, app} {
		mounted := false
		for _, m := range c.MountPoints {
			mounted = mounted || (vols[m.SourceVolume] && m.ContainerPath == dir)
		}
		if !mounted {
			t.Errorf("%s: no task volume at %s, the socket's directory", c.Name, dir)
		}
	}
	healthy := false
	for _, d := range app.DependsOn {
		healthy = healthy || (d.ContainerName == svc.Name && d.Condition == "HEALTHY")
	}
	if !healthy {
		t.Error("the app does not wait for a HEALTHY capgate-decide")
	}
	_, port, _ := strings.Cut(se["CAPGATE_ADMIN_LISTEN"], ":")
	mapped := false
	for _, p := range svc.Ports {
		mapped = mapped || strconv.Itoa(p.ContainerPort) == port
	}
	if port == "" || !mapped {
		t.Errorf("CAPGATE_ADMIN_LISTEN %q: its port is not mapped", se["CAPGATE_ADMIN_LISTEN"])
	}
	shutdown, err := server.ParseDuration(se["CAPGATE_SHUTDOWN_TIMEOUT"], time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(svc.StopTimeout)*time.Second <= shutdown {
		t.Errorf("stopTimeout %d s ≤ CAPGATE_SHUTDOWN_TIMEOUT %v", svc.StopTimeout, shutdown)
	}
	checkWaiters(t, "ecs", se["CAPGATE_MAX_WAITING"], ae["GUNICORN_CMD_ARGS"])
	known := decideKnows(t)
	for name := range se {
		if !known[name] {
			t.Errorf("capgate-decide sets %s, which decide does not read", name)
		}
	}
	for _, s := range svc.Secrets {
		if !known[s.Name] {
			t.Errorf("capgate-decide's secret %s is not a variable decide reads", s.Name)
		}
	}
}

// TestComposeDecide: compose's decide service shares its socket's volume
// and group as documented, and sets only variables decide reads.
func TestComposeDecide(t *testing.T) {
	y := readDeploy(t, composeYML)
	_, svc, ok := strings.Cut(y, "\n  decide:\n")
	if !ok {
		t.Fatal("compose.yaml has no decide service")
	}
	svc, _, _ = strings.Cut(svc, "\nvolumes:\n")
	env := func(name string) string {
		return strings.Trim(one(t, svc, "decide", `\n\s+`+name+`: (\S+)`), `"`)
	}
	_, group, _ := strings.Cut(strings.Trim(one(t, svc, "decide", `user: (\S+)`), `"`), ":")
	dir := checkSocket(t, "compose decide", env("CAPGATE_DECIDE_LISTEN"), env("CAPGATE_SOCKET_MODE"), env("CAPGATE_SOCKET_GROUP"), group)
	vol := one(t, svc, "decide", `- (\S+):`+regexp.QuoteMeta(dir)+`\n`)
	if !regexp.MustCompile(`(?m)^volumes:\n(?:  .*\n)*  ` + regexp.QuoteMeta(vol) + `:`).MatchString(y) {
		t.Errorf("the socket's volume %s is not a named volume of the project", vol)
	}
	known := decideKnows(t)
	for _, m := range regexp.MustCompile(`\n\s+((?:CAPGATE|CAPACITY|REDIS)_[A-Z_]+):`).FindAllStringSubmatch(svc, -1) {
		if !known[m[1]] {
			t.Errorf("compose's decide sets %s, which decide does not read", m[1])
		}
	}
}
