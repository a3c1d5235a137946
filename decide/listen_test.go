package decide_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/capgate/capgate/decide"
)

// TestSocketModeAndGroup: the socket file has the mode and group asked
// for, is the only file left in its directory, and is removed on close.
func TestSocketModeAndGroup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.sock")
	gid := os.Getgid()
	ln, err := decide.Listen(decide.UnixPrefix+path, "", false, decide.SocketOptions{Mode: 0o660, Group: strconv.Itoa(gid)})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %v, want a socket of mode 0660", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid {
		t.Errorf("socket gid %d, want %d", st.Gid, gid)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %v, want the socket alone (the private directory removed)", ents)
	}
	if ln.Addr().String() != path {
		t.Errorf("Addr %q, want %q", ln.Addr(), path)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the socket: %v", err)
	}
	c.Close()
	// One that answers is not replaced.
	if _, err := decide.Listen(decide.UnixPrefix+path, "", false, decide.SocketOptions{}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("a second listen on a live socket: %v, want refused", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("after close: %v, want the socket file gone", err)
	}
	// The group by name.
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		t.Skipf("no name for gid %d: %v", gid, err)
	}
	ln, err = decide.Listen(decide.UnixPrefix+path, "", false, decide.SocketOptions{Mode: 0o660, Group: g.Name})
	if err != nil {
		t.Fatalf("socket group %q by name: %v", g.Name, err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(path); err != nil || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Errorf("socket group by name %q: %v, want gid %d", g.Name, err, gid)
	}
}

// TestStaleSocketIsReplaced: a socket file nobody serves on is replaced.
func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // gone, its file left behind
	ln, err := decide.Listen(decide.UnixPrefix+path, "", false, decide.SocketOptions{Mode: 0o600})
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v (%v), want mode 0600", fi, err)
	}
}

func TestSocketOptionErrors(t *testing.T) {
	for _, bad := range []string{"999", "rw-rw----", "0", "1777", "-1"} {
		if _, err := decide.ParseSocketMode(bad); err == nil || !strings.Contains(err.Error(), "octal") {
			t.Errorf("ParseSocketMode(%q): %v, want an error asking for octal bits", bad, err)
		}
	}
	if m, err := decide.ParseSocketMode("0660"); err != nil || m != 0o660 {
		t.Errorf("ParseSocketMode(0660): %v, %v", m, err)
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		addr string
		so   decide.SocketOptions
		want string
	}{
		{decide.UnixPrefix + dir + "/a.sock", decide.SocketOptions{Group: "no-such-group-capgate"}, "no-such-group-capgate"},
		{decide.UnixPrefix + dir + "/b.sock", decide.SocketOptions{Group: "-3"}, "group id"},
		{"127.0.0.1:0", decide.SocketOptions{Mode: 0o660}, "unix socket"},
		{decide.UnixPrefix + dir + "/nodir/c.sock", decide.SocketOptions{}, "does not exist: create it first"},
	} {
		ln, err := decide.Listen(tt.addr, "t", false, tt.so)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Listen(%q, %+v): %v, want an error naming %q", tt.addr, tt.so, err, tt.want)
		}
		if ln != nil {
			ln.Close()
		}
	}
	if os.Getuid() != 0 {
		// A group the service is not a member of (root's, gid 0).
		if ln, err := decide.Listen(decide.UnixPrefix+dir+"/d.sock", "", false, decide.SocketOptions{Group: "0"}); err == nil {
			ln.Close()
			if os.Getgid() != 0 {
				t.Error("a socket group the service is not a member of was accepted")
			}
		} else if !strings.Contains(err.Error(), "member") {
			t.Errorf("a foreign group: %v, want it to say the service must be a member", err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("after the failures %s holds %v, want nothing", dir, ents)
	}
}

// A socket whose directory does not exist names the directory and how to
// make it (it used to say "make a private directory beside the socket:
// stat …: no such file or directory").
func TestSocketDirectoryMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "capgate")
	_, err := decide.Listen(decide.UnixPrefix+filepath.Join(dir, "decide.sock"), "", false, decide.SocketOptions{})
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "the socket's directory "+dir+" does not exist: create it first") ||
		!strings.Contains(err.Error(), "install -d") {
		t.Errorf("listen in a missing directory: %v; want it named, with how to create it", err)
	}
}
