// Package migrate reads the embedded schema migrations both config stores
// apply, and decides which ones a database still lacks. Running them is
// the store's: each driver has its own transaction and lock.
package migrate

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema change, from a file named NNNN_what.sql.
type Migration struct {
	Version int
	SQL     string
}

// Load returns the migrations/*.sql files of fsys in version order. It
// fails when there are none or a name has no version number.
func Load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", base)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, errors.New("no migrations embedded")
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Latest returns the newest version of ms (sorted, as Load returns them).
func Latest(ms []Migration) int { return ms[len(ms)-1].Version }

// Pending returns the migrations newer than have, the version a database
// is at. A database newer than every migration is an error: this binary
// doesn't know its schema.
func Pending(ms []Migration, have int) ([]Migration, error) {
	if known := Latest(ms); have > known {
		return nil, fmt.Errorf("the database schema is version %d, newer than this capgate knows (%d): upgrade capgate", have, known)
	}
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Version > have })
	return ms[i:], nil
}
