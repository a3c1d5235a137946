//go:build faults

package faults

import (
	"strings"
	"testing"
)

// TestSpliceDoc: a regeneration rewrites the header and table and keeps
// the hand-written sections below the marker; a file without the marker
// gets the suite's notes.
func TestSpliceDoc(t *testing.T) {
	old := "# old title\n\n| old table |\n\n" + docMarker + "\n\n## By hand\n\nkept\n"
	got := spliceDoc("# new title\n\n| new table |\n", old)
	want := "# new title\n\n| new table |\n\n" + docMarker + "\n\n## By hand\n\nkept\n"
	if got != want {
		t.Errorf("spliceDoc kept:\n%s\nwant:\n%s", got, want)
	}
	if again := spliceDoc("# new title\n\n| new table |\n", got); again != want {
		t.Errorf("a second regeneration changed the file:\n%s", again)
	}
	first := spliceDoc("# t\n", "")
	if !strings.HasSuffix(first, docMarker+"\n"+docNotes) || !strings.HasPrefix(first, "# t\n\n"+docMarker) {
		t.Errorf("without a marker: %q, want the table, the marker and docNotes", first)
	}
}
