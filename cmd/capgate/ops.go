package main

import (
	"fmt"
	"io"

	"github.com/capgate/capgate/internal/jsonenc"
)

// printJSON writes v as JSON indented by 2 spaces, the CLI's output.
func printJSON(w io.Writer, v any) error {
	if err := jsonenc.Print(w, v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
