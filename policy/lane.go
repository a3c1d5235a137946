package policy

import "github.com/capgate/capgate/header"

// The caller side of a policy (identity and tiers), its lanes and its
// names.

// Identity says who a caller is and their tier.
type Identity struct {
	Resolver string // upstream, header, tokens or jwt
	Scheme   string // the Authorization scheme: Token or Bearer
	Tiers    []TierRule
	Default  string // the tier when no rule holds
	// JWT holds what the jwt resolver checks and reads; nil for another
	// resolver. The key set is a deployment's (--jwks), not the policy's.
	JWT *JWT
	// RefuseUnverified (unverified: refuse) answers a heavy call whose
	// credential the resolver can't verify with 401 in mode enforce;
	// false (unverified: anonymous, the default) gates it as the user
	// "(anonymous)" of the default tier. A call with no credential at all
	// passes either way.
	RefuseUnverified bool
}

// JWT is the jwt resolver's part of a policy: the issuer and audience
// every token must carry, and the claims naming the user, their groups and
// (optionally) staff.
type JWT struct {
	Issuer      string
	Audience    string
	UserClaim   string // default "sub"
	GroupsClaim string // default "groups"
	StaffClaim  string // "": nobody is staff by token
}

// Resolvers are the identity resolvers a policy may name.
var Resolvers = []string{"upstream", "header", "tokens", "jwt"}

// TierRule gives Tier to a caller who is staff (Staff) or in one of Groups.
type TierRule struct {
	Tier   string
	Staff  bool
	Groups []string
}

// TierOf returns the tier of a caller: the first rule that holds, else the
// default.
func (id *Identity) TierOf(staff bool, groups []string) string {
	for _, r := range id.Tiers {
		if r.Staff && staff {
			return r.Tier
		}
		for _, g := range r.Groups {
			for _, h := range groups {
				if g == h {
					return r.Tier
				}
			}
		}
	}
	return id.Default
}

func (id *Identity) tierNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range id.Tiers {
		if !seen[r.Tier] {
			seen[r.Tier] = true
			out = append(out, r.Tier)
		}
	}
	if !seen[id.Default] {
		out = append(out, id.Default)
	}
	return out
}

// Scope is what one count of a lane covers.
type Scope int

const (
	ScopeCluster Scope = iota + 1 // one count for the whole cluster
	ScopeTask                     // one count per API task (host)
	ScopeKey                      // one count per value of Lane.Key
)

func (s Scope) String() string {
	switch s {
	case ScopeCluster:
		return "cluster"
	case ScopeTask:
		return "task"
	case ScopeKey:
		return "key"
	}
	return "unknown"
}

// The keys a keyed lane may use besides a call field.
const (
	KeyUser = "user" // the caller's user id
	KeyTier = "tier" // the caller's tier
)

// Lane is one count of calls in flight and its limit.
type Lane struct {
	Name   string
	Scope  Scope
	Key    string   // ScopeKey: "user", "tier" or a field every route of the lane extracts
	Routes []string // the routes that take it
	// OnlyIf, if set, is a bool field: a call of one of Routes takes the
	// lane only when it is true (the built-in policy's kNN lane: semantic calls).
	OnlyIf string
	Limit  Limit
	// KeyLimits, for a lane keyed by a call field, are the default limits
	// of some of its key values (a model's own limit); a value without one
	// takes Limit. At most MaxKeyLimits; the runtime config keeps the
	// numbers in force under "key_limits.<lane>.<value>".
	KeyLimits map[string]int
	// Reserve, if set, holds part of the limit for one class of calls:
	// every other call sees limit − reserve.
	Reserve *Reserve
	// Headers, if set, are the response headers (after the names' prefix)
	// that carry the lane's limit and count.
	Headers *LaneHeaders
	// Log names the log line's fields of the lane's count and limit:
	// default <name>_in_flight and <name>_limit.
	Log LaneLog
	// Status is the key of the lane in the status JSON: default its name.
	Status string

	index int
	line  int
	lines map[string]int // the line of each of its fields, for messages
}

// lineOf returns the line of the lane's field key, else the lane's.
func (l *Lane) lineOf(key string) int {
	if n, ok := l.lines[key]; ok {
		return n
	}
	return l.line
}

// Index returns the lane's position in the policy (its plan order).
func (l *Lane) Index() int { return l.index }

// Takes reports whether calls of r may take the lane (OnlyIf aside).
func (l *Lane) Takes(r *Route) bool {
	for _, n := range l.Routes {
		if n == r.Name {
			return true
		}
	}
	return false
}

// ByUser reports whether the lane counts each caller apart (scope key,
// keyed by user): the caller's own lane.
func (l *Lane) ByUser() bool { return l.Scope == ScopeKey && l.Key == KeyUser }

// ByTier reports whether the lane counts each tier apart.
func (l *Lane) ByTier() bool { return l.Scope == ScopeKey && l.Key == KeyTier }

// ByField reports whether the lane counts each value of a call field
// apart (a model, a tenant).
func (l *Lane) ByField() bool { return l.Scope == ScopeKey && !l.ByUser() && !l.ByTier() }

// Shared reports whether one count of the lane is shared by every caller
// and has one limit: a cluster or task lane with a single limit. Only such
// a lane may have an adaptive limit.
func (l *Lane) Shared() bool { return l.Scope != ScopeKey && l.Limit.PerTier == nil }

// TakesCall reports whether a call of r with fields f takes the lane.
func (l *Lane) TakesCall(r *Route, f *Fields) bool {
	if r == nil || !r.TakesLane(l.index) {
		return false
	}
	if l.OnlyIf == "" {
		return true
	}
	i := r.Field(l.OnlyIf)
	return i >= 0 && f != nil && f.Bool(i)
}

// MaxKeyLimits is the most key values a lane has a limit of its own for
// (the policy's and the runtime config's key_limits): a call's plan looks
// its key up, and the status lists them all.
const MaxKeyLimits = 64

// MaxKeyLimitValue is the longest key value, in bytes, a key limit may
// name: longer values count under a cut key (a hash appended), which no
// configured value could name.
const MaxKeyLimitValue = 128

// KeyLimitsKey is the runtime config's key of the lanes' key limits:
// "key_limits.<lane>.<value>".
const KeyLimitsKey = "key_limits"

// Limit is a lane's limit: one number, or one per tier; Config is the
// runtime-config key it lives at (per tier: Config + "." + tier).
type Limit struct {
	Value   int            // when PerTier is nil
	PerTier map[string]int // the default limit of each tier
	Config  string
}

// ConfigKeys returns the runtime-config keys of the limit, tiers in order.
func (l Limit) ConfigKeys(tiers []string) []string {
	if l.PerTier == nil {
		return []string{l.Config}
	}
	out := make([]string, 0, len(tiers))
	for _, t := range tiers {
		out = append(out, l.Config+"."+t)
	}
	return out
}

// Reserve holds Value of a lane's limit for calls of Class; its number
// lives at Config. Lend of those seats, while the class leaves them idle,
// may be borrowed by the lane's other calls (default 0: none; staff change
// it at runtime, the config's optional "lending.<lane>").
type Reserve struct {
	Class  string
	Value  int
	Config string
	Lend   int
}

// LaneLog names the log line's fields of a lane.
type LaneLog struct {
	InFlight string
	Limit    string
}

// LaneHeaders name the headers of a lane's limit and in-flight count, each
// after Names.HeaderPrefix.
type LaneHeaders struct {
	Limit    string
	InFlight string
}

// Names are what capgate calls things on the wire and in its logs.
type Names struct {
	// HeaderPrefix starts every capacity header: "Capgate-" for a policy
	// written for capgate (the built-in policy keeps the prefix it has
	// always sent).
	HeaderPrefix string
	// RateLimit sends the IETF RateLimit and RateLimit-Policy fields.
	RateLimit bool
	// RefusalDetail is the refusal body's "detail", a text template:
	// "{retry_after}" is replaced by the seconds, and so is each other
	// placeholder of an answer but {detail} (Answers.RefusalDetail).
	RefusalDetail string
	// RefusalCode is the refusal body's "error_code".
	RefusalCode string
	// LogEvent is the per-call log line's "event".
	LogEvent string
	// MetadataHeader is the client-metadata header (a JSON object), and
	// AwareField its key that says the client handles refusals.
	MetadataHeader string
	AwareField     string
	// MetadataLog are the keys of the client metadata the log line keeps,
	// in its order, each cut to its MaxChars.
	MetadataLog []MetadataKey
	// RequestSourceHeader names where the call came from, for the log line.
	RequestSourceHeader string
	// KeyPrefix starts every key capgate keeps in its lane store: OCL
	// "ocl:capacity"; default "capgate:<the policy's name>", so that two
	// APIs sharing one store never share a lane or a kept answer.
	KeyPrefix string
	// LogRouteKey is the log line's key of the route's LogName: OCL
	// "endpoint"; default "route".
	LogRouteKey string
	// Answers shape the answers capgate writes itself (names.answers):
	// the zero value, capgate's own shape, for a policy without.
	Answers Answers
}

// MaxMetadataLog is the most client-metadata keys the log line keeps.
const MaxMetadataLog = 4

// MetadataKey is one key of the client metadata the log line keeps.
type MetadataKey struct {
	Key      string
	MaxChars int
}

// The defaults of the names a policy may leave out.
const (
	// DefaultKeyPrefix starts the key prefix of a policy that gives none
	// (DefaultKeyPrefix:<name>), and is the prefix of a store or gate
	// told none at all.
	DefaultKeyPrefix   = "capgate"
	DefaultLogRouteKey = "route"
)

// Header returns the names as a client reads them (package header): the
// capacity headers under HeaderPrefix, the client-metadata header and its
// aware field, the request-source header and the refusal's error code.
func (n Names) Header() header.Names {
	h := header.NewNames(n.HeaderPrefix, n.MetadataHeader, n.AwareField, n.RequestSourceHeader)
	h.RefusalCode = n.RefusalCode
	return h
}
