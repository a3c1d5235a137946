package migrate_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/capgate/capgate/internal/migrate"
)

func TestLoadAndPending(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/0002_more.sql":  {Data: []byte("B")},
		"migrations/0001_first.sql": {Data: []byte("A")},
	}
	ms, err := migrate.Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[1].SQL != "B" || migrate.Latest(ms) != 2 {
		t.Fatalf("loaded %+v", ms)
	}
	for have, want := range map[int]int{0: 2, 1: 1, 2: 0} {
		p, err := migrate.Pending(ms, have)
		if err != nil || len(p) != want {
			t.Errorf("Pending(have %d) = %d migrations, %v; want %d", have, len(p), err, want)
		}
	}
	if _, err := migrate.Pending(ms, 3); err == nil || !strings.Contains(err.Error(), "newer than this capgate knows (2)") {
		t.Fatalf("a newer database: %v", err)
	}
	if _, err := migrate.Load(fstest.MapFS{"migrations/x.sql": {}}); err == nil {
		t.Fatal("a name without a version was accepted")
	}
	if _, err := migrate.Load(fstest.MapFS{}); err == nil {
		t.Fatal("no migrations was accepted")
	}
}
