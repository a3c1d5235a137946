package server

import (
	"net/url"
	"runtime/debug"
	"strings"
)

// MaskURL returns a database or Redis URL fit for logs and output: the
// password replaced by xxxxx, and a password= query parameter too.
func MaskURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return s
	}
	if u.Opaque != "" { // sqlite:path
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Version is this binary's version from its build info: the module
// version (a tagged build), else the VCS revision and time, with
// "+dirty" for a modified tree.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if v != "" && v != "(devel)" {
		return v
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return strings.TrimSpace("devel " + rev + dirty + " " + at)
}
