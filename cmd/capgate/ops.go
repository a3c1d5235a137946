package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// maskURL returns a database or Redis URL fit for logs and output: the
// password replaced by xxxxx, and a password= query parameter too.
func maskURL(s string) string {
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

// printJSON writes v as JSON indented by 2 spaces, the CLI's output.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
