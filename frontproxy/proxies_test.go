package frontproxy_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/capgate/capgate"
	"github.com/capgate/capgate/frontproxy"
	capgatehttp "github.com/capgate/capgate/http"
	"github.com/capgate/capgate/identity"
	"github.com/capgate/capgate/internal/skipnote"
	"github.com/capgate/capgate/memory"
	"github.com/capgate/capgate/policy"
	"github.com/capgate/capgate/settings"
	"github.com/capgate/capgate/tools/simapi"
)

var update = flag.Bool("update", false, "rewrite deploy/'s routing files from the generator")

func TestMain(m *testing.M) { skipnote.Main(m) }

// needProxy skips t when the machine lacks tool, or fails it when
// CAPGATE_REQUIRE_FRONTPROXY=1 (set by .ci/run once the packages are in).
func needProxy(t *testing.T, tool string) string {
	t.Helper()
	bin, err := exec.LookPath(tool)
	if err == nil {
		return bin
	}
	if os.Getenv("CAPGATE_REQUIRE_FRONTPROXY") == "1" {
		t.Fatalf("%s is not installed; CAPGATE_REQUIRE_FRONTPROXY=1", tool)
	}
	skipnote.Skip(t, "the front-proxy tests ("+tool+" is not installed)", "run scripts/frontproxy-deps.sh")
	return ""
}

// deployFiles are deploy/'s routing files: the built-in policy's routing
// with the default addresses.
var deployFiles = map[string]string{
	"nginx":   "../deploy/frontproxy/nginx-capgate-routes.conf",
	"haproxy": "../deploy/frontproxy/haproxy-capgate-routes.cfg",
	"alb":     "../deploy/frontproxy/alb-listener-rule.json",
}

// deploy/ holds what the generator writes for the built-in policy.
func TestDeployFilesAreGenerated(t *testing.T) {
	for format, file := range deployFiles {
		var b bytes.Buffer
		if err := frontproxy.Write(&b, format, policy.OCL(), frontproxy.Options{}); err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(got, b.Bytes()) {
			t.Errorf("%s is not what `capgate policy routes --format %s` writes (%v); run go test ./frontproxy -run TestDeployFilesAreGenerated -update", file, format, err)
		}
	}
}

// rig is a real capgate gateway in front of the simulated OCL API, and
// how many requests reached the gateway.
type rig struct {
	api, gateway string // host:port
	via          atomic.Int64
}

func newRig(t *testing.T) *rig {
	t.Helper()
	api := httptest.NewServer(simapi.New(simapi.DemoUsers()))
	t.Cleanup(api.Close)
	cfg := settings.Default(policy.OCL(), settings.ModeShadow)
	gate, err := capgate.NewGate(memory.New(nil), settings.NewFixed(cfg), nil, "front")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close(t.Context()) })
	var entries []identity.TokenEntry
	for _, u := range simapi.DemoUsers() {
		entries = append(entries, identity.TokenEntry{Token: u.Token, Username: u.Username, IsStaff: u.IsStaff, AuthGroups: u.Groups})
	}
	ids, err := identity.NewTokens(entries)
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse(api.URL)
	gw, err := capgatehttp.NewGateway(capgatehttp.GatewayConfig{Upstream: up, Gate: gate, Identify: ids})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{api: up.Host}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.via.Add(1)
		gw.ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	r.gateway = strings.TrimPrefix(front.URL, "http://")
	return r
}

// freeAddr returns a loopback address nothing listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// send writes one request with target as sent (no client re-encodes it)
// and returns the answer's status and headers.
func send(t *testing.T, addr, method, target, token, body string) (int, http.Header) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: api.example\r\nAuthorization: Token %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, token, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s through %s: %v", method, target, addr, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// start runs a proxy in the foreground until the test ends, and waits
// until it accepts on addr.
func start(t *testing.T, addr string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(name)+".out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() }) // after the process is gone (cleanups run last first)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: nginx's workers go with their master.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("%s never listened on %s: %s", name, addr, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkRouting sends light and heavy calls through the front proxy at
// front: the light ones reach the API without the gateway, the heavy ones
// (however spelled) go through it and are gated.
func checkRouting(t *testing.T, r *rig, front string) {
	t.Helper()
	const rows = `{"rows":[{"name":"malaria"}]}`
	for _, tt := range []struct {
		name, method, target, body string
		viaCapgate, gated          bool
	}{
		{"a light GET", "GET", "/concepts/?q=malaria", "", false, false},
		{"a light POST elsewhere", "POST", "/concepts/", rows, false, false},
		{"a GET of a heavy path", "GET", "/concepts/$match/", "", false, false},
		{"a semantic $match", "POST", "/concepts/$match/?semantic=true", rows, true, true},
		{"a $rerank without the slash", "POST", "/concepts/$rerank", `{"rows":[{"a":1}],"q":"x"}`, true, true},
		{"a $match spelled %24, %6D", "POST", "/concepts/%24%6Datch/?semantic=true", rows, true, true},
		{"a $match in absolute form", "POST", "http://api.example/concepts/$match/?reranker=true", rows, true, true},
		{"a lexical $match: routed, not gated", "POST", "/concepts/$match/", rows, true, false},
	} {
		before := r.via.Load()
		code, h := send(t, front, tt.method, tt.target, "grace-token", tt.body)
		went := r.via.Load() > before
		gated := h.Get("X-Ocl-Capacity-Decision") != ""
		if code != http.StatusOK || went != tt.viaCapgate || gated != tt.gated {
			t.Errorf("%s (%s %s): %d, through capgate %v, gated %v; want 200, through capgate %v, gated %v",
				tt.name, tt.method, tt.target, code, went, gated, tt.viaCapgate, tt.gated)
		}
	}
}

// Why: every call paid for capgate's proxy. The nginx routing from the
// generator passes `nginx -t`, and a real nginx sends light calls straight
// to the API and heavy ones through capgate.
func TestNginxRoutesOnlyHeavyCallsThroughCapgate(t *testing.T) {
	bin := needProxy(t, "nginx")
	r := newRig(t)
	dir := t.TempDir()
	listen := freeAddr(t)
	var routes bytes.Buffer
	if err := frontproxy.Write(&routes, "nginx", policy.OCL(), frontproxy.Options{Listen: listen, Capgate: r.gateway, API: r.api}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "capgate-routes.conf"), routes.String())
	conf := filepath.Join(dir, "nginx.conf")
	write(t, conf, fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/capgate-routes.conf;
}
`, dir))
	if out, err := exec.Command(bin, "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	start(t, listen, bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf)
	checkRouting(t, r, listen)
}

// The same through HAProxy, after `haproxy -c`.
func TestHAProxyRoutesOnlyHeavyCallsThroughCapgate(t *testing.T) {
	bin := needProxy(t, "haproxy")
	r := newRig(t)
	listen := freeAddr(t)
	var routes bytes.Buffer
	if err := frontproxy.Write(&routes, "haproxy", policy.OCL(), frontproxy.Options{Listen: listen, Capgate: r.gateway, API: r.api}); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	write(t, cfg, routes.String())
	if out, err := exec.Command(bin, "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	start(t, listen, bin, "-db", "-f", cfg)
	checkRouting(t, r, listen)
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
