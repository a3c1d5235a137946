package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capgate/capgate/internal/skipnote"
)

// readmeWalkthrough is the README section the test runs, block by block.
const readmeWalkthrough = "## Try the gateway by hand"

// walkCommand is one command of the README's shell blocks and the output
// the README says it shows (its "# " lines right after it).
type walkCommand struct {
	line   string   // the command, continuations joined
	expect []string // expected output lines, without "# "
	bg     bool     // ends with &: started in the background
}

// readmeCommands reads the shell blocks of the README section titled
// heading. In a block, "# " lines right after a command are its output as
// the README shows it; "# " lines before a block's first command or
// after a blank line are prose.
func readmeCommands(t *testing.T, heading string) []walkCommand {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no section %q", heading)
	}
	text = text[i+1:]
	if j := strings.Index(text[len(heading):], "\n## "); j >= 0 {
		text = text[:len(heading)+j]
	}
	var cmds []walkCommand
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
		lines := strings.Split(m[1], "\n")
		after := false // the previous line was a command or its output
		for k := 0; k < len(lines); k++ {
			l := lines[k]
			switch {
			case strings.TrimSpace(l) == "":
				after = false
			case strings.HasPrefix(l, "#"):
				if after && len(cmds) > 0 {
					c := &cmds[len(cmds)-1]
					c.expect = append(c.expect, strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
				}
			default:
				for strings.HasSuffix(l, `\`) && k+1 < len(lines) {
					k++
					l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[k])
				}
				c := walkCommand{line: l}
				code := strings.TrimSpace(l)
				if h := strings.Index(code, " #"); h >= 0 {
					code = strings.TrimSpace(code[:h])
				}
				c.bg = strings.HasSuffix(code, "&")
				cmds = append(cmds, c)
				after = true
			}
		}
	}
	return cmds
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestReadmeWalkthrough runs every command of the README's "Try the gateway
// by hand" as written, in one bash, in order, and checks each shows the
// output the README gives it (its "# " lines; "…" and "..." stand for
// anything, spacing is ignored) and exits 0. What it changes: the ports
// (8000 and 8080 become free ones), ./capgate (this test binary acting as
// capgate, not a go build) and loadgen's --duration 20s (3s); it waits for
// each server started in the background to answer, and after each config
// change from the command line for the gateway to have it, before going
// on, where a person would take a moment.
func TestReadmeWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's walkthrough for about half a minute")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipnote.Skip(t, "the README walkthrough", "install "+tool)
		}
	}
	cmds := readmeCommands(t, readmeWalkthrough)
	if len(cmds) < 10 {
		t.Fatalf("found %d commands in %q, want the walkthrough", len(cmds), readmeWalkthrough)
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nCAPGATE_TEST_MAIN=1 GORACE=atexit_sleep_ms=0 exec %q \"$@\"\n", exe)
	if err := os.WriteFile(filepath.Join(dir, "capgate"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	apiAddr, gwAddr := freeAddr(t), freeAddr(t)
	subst := strings.NewReplacer("127.0.0.1:8000", apiAddr, "127.0.0.1:8080", gwAddr, "--duration 20s", "--duration 3s")

	var script strings.Builder
	script.WriteString("set -u\n")
	for i, c := range cmds {
		line := subst.Replace(c.line)
		switch {
		case strings.HasPrefix(line, "go build "):
			fmt.Fprintf(&script, "echo '@@%d'; echo '@@end %d 0'\n", i, i) // the wrapper stands in for the build
		case c.bg:
			code := line
			if h := strings.Index(code, " #"); h >= 0 {
				code = code[:h]
			}
			code = strings.TrimSuffix(strings.TrimSpace(code), "&")
			fmt.Fprintf(&script, "echo '@@%d'; %s > bg%d.log 2>&1 &\n", i, code, i)
			if m := regexp.MustCompile(`--listen (\S+)`).FindStringSubmatch(line); m != nil {
				// The gateway is ready for the walkthrough once the staff
				// API reads the config: /readyz is ready on the defaults
				// already, while the SQLite migration may still run (on a
				// loaded machine, seconds), and a change sent then fails.
				probe := "curl -s -o /dev/null http://" + m[1] + "/readyz"
				if strings.Contains(line, " serve ") {
					probe = "[ \"$(curl -s -o /dev/null -w '%{http_code}' http://" + m[1] + "/capacity/config/ -H 'Authorization: Token staff-1-token')\" = 200 ]"
				}
				fmt.Fprintf(&script, "for n in $(seq 600); do %s && break; sleep 0.05; done\n", probe)
			}
			fmt.Fprintf(&script, "echo '@@end %d 0'\n", i)
		default:
			fmt.Fprintf(&script, "echo '@@%d'\n%s\necho; echo \"@@end %d $?\"\n", i, line, i)
			if regexp.MustCompile(`capgate capacity (set|reset|rollback)`).MatchString(line) {
				// A person takes a moment before the next command; the
				// script waits instead until the gateway decides with the
				// version (pushed within 250 ms, later on a loaded
				// machine), at most 30 s. The staff API reads the store,
				// so it has the version before the gate does: the gate's
				// own is capgate_config_version.
				fmt.Fprintf(&script, `v=$(./capgate capacity show | sed -n 's/^  "version": \([0-9]*\),$/\1/p')
for n in $(seq 600); do curl -s http://%s/metrics -H 'Authorization: Token staff-1-token' | grep -q "^capgate_config_version $v$" && break; sleep 0.05; done
`, gwAddr)
			}
		}
	}
	script.WriteString("wait\n")
	cmd := exec.CommandContext(t.Context(), "bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CAPGATE_DATABASE=", "CAPACITY_LIMIT_MODE=", "CAPGATE_REDIS_URL=", "REDIS_HOST=",
		"REDIS_SENTINELS=", "CAPGATE_REDIS=", "CAPGATE_KEY_PREFIX=")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("bash: %v", err)
	}
	outputs := map[int]string{}
	codes := map[int]string{}
	for _, m := range regexp.MustCompile(`(?s)@@(\d+)\n(.*?)@@end (\d+) (\d+)\n`).FindAllStringSubmatch(string(out), -1) {
		var i int
		fmt.Sscan(m[1], &i)
		outputs[i], codes[i] = m[2], m[4]
	}
	for i, c := range cmds {
		got, ran := outputs[i]
		switch {
		case !ran:
			t.Errorf("command %d did not run: %s\nthe run's output:\n%s", i, c.line, out)
			return
		case codes[i] != "0":
			t.Errorf("%s\nexited %s; output:\n%s", c.line, codes[i], got)
		}
		if missing := firstMissing(got, c.expect); missing != "" {
			t.Errorf("%s\nshould show %q (README: %q); it showed:\n%s", c.line, missing, c.expect, got)
		}
	}
	if t.Failed() {
		for _, log := range []string{"bg1.log", "bg2.log"} {
			if b, err := os.ReadFile(filepath.Join(dir, log)); err == nil {
				t.Logf("%s:\n%s", log, b)
			}
		}
	}
}

// firstMissing returns the first piece of want that got lacks, or "": the
// lines in order, each cut at "…" and "..." into pieces that must follow
// one another, spacing ignored.
func firstMissing(got string, want []string) string {
	squash := func(s string) string { return strings.Join(strings.Fields(s), "") }
	rest := squash(got)
	for _, line := range want {
		for _, piece := range regexp.MustCompile(`…|\.\.\.`).Split(line, -1) {
			p := squash(piece)
			if p == "" {
				continue
			}
			i := strings.Index(rest, p)
			if i < 0 {
				return piece
			}
			rest = rest[i+len(p):]
		}
	}
	return ""
}
