// Package jsonenc encodes JSON as capgate writes it everywhere: without
// encoding/json's HTML escaping, so that a note or a URL with <, > or &
// reads the same in a log line, a stored config and the CLI's output. The
// one exception is the per-call log line's strings (AppendStringHTMLSafe),
// whose bytes are pinned.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"io"
)

// Marshal returns v as one line of compact JSON, without HTML escaping and
// without a trailing newline.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Print writes v to w as JSON indented by two spaces, without HTML
// escaping, followed by a newline: the CLI's output.
func Print(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
