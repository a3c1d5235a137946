package identity

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
)

// Staff identifies the callers of capgate's own staff endpoints
// (the staff API, /metrics): by a static staff token first (--staff-tokens,
// no lookup), then by Next. With Next the upstream's /user/ lookup, the
// status page and /metrics keep working, for holders of a static token,
// while the API is down. Create one with NewStaff; safe for
// concurrent use.
type Staff struct {
	static Identifier
	next   Identifier
}

// NewStaff returns the staff identity of static (the staff tokens:
// Tokens, or any Identifier that never looks anything up) over
// next. A caller static knows is taken as it says, staff or not.
func NewStaff(static, next Identifier) *Staff {
	return &Staff{static: static, next: next}
}

// Identify implements Identifier.
func (s *Staff) Identify(ctx context.Context, r *http.Request) (Caller, bool, error) {
	if s.static != nil {
		c, ok, err := s.static.Identify(ctx, r)
		if err == nil && ok {
			return c, true, nil
		}
	}
	return s.next.Identify(ctx, r)
}

// NewStaffTokens returns the Tokens of entries that must all be staff
// (--staff-tokens: the same format as --tokens, every entry "is_staff":
// true, so that the file says what it grants). It returns an error as
// NewTokens does, and for an entry that is not staff.
func NewStaffTokens(entries []TokenEntry) (*Tokens, error) {
	for i, e := range entries {
		if !e.IsStaff {
			return nil, fmt.Errorf("staff tokens: entry %d (%s): not staff; every entry must have \"is_staff\": true", i, e.Username)
		}
	}
	return NewTokens(entries)
}

// HasToken reports whether r carries token (non-empty) as
// "Authorization: Bearer <token>" (or "Token <token>"), compared in
// constant time: the gateway's check of its /metrics token.
func HasToken(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

var _ Identifier = (*Staff)(nil)
