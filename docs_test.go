package capgate_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs stand alone: every relative link names a file in the
// repository, and none cites the specification or reference notes the
// project was built from, which are not in it.
func TestDocsCiteOnlyFilesInTheRepository(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, bad := range []string{"SPEC §", "SPEC.md", "reference/", "original-behaviour", "mapper-client-behaviour"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s cites %q, which is not in the repository", doc, bad)
			}
		}
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
			}
		}
	}
}
