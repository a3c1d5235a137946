package policy

// The caller side of a policy (identity and tiers), its lanes and its
// names.

// Identity says who a caller is and their tier.
type Identity struct {
	Resolver string // upstream, header or tokens
	Scheme   string // the Authorization scheme: Token or Bearer
	Tiers    []TierRule
	Default  string // the tier when no rule holds
}

// Resolvers are the identity resolvers a policy may name.
var Resolvers = []string{"upstream", "header", "tokens"}

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
	// lane only when it is true (OCL's es2_knn: semantic calls).
	OnlyIf string
	Limit  Limit
	// Reserve, if set, holds part of the limit for one class of calls:
	// every other call sees limit − reserve.
	Reserve *Reserve
	// Headers, if set, are the response headers (after the names' prefix)
	// that carry the lane's limit and count.
	Headers *LaneHeaders

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

// Takes reports whether calls of r may take the lane (OnlyIf aside).
func (l *Lane) Takes(r *Route) bool {
	for _, n := range l.Routes {
		if n == r.Name {
			return true
		}
	}
	return false
}

// TakesCall reports whether a call of r with fields f takes the lane.
func (l *Lane) TakesCall(r *Route, f *Fields) bool {
	if !l.Takes(r) {
		return false
	}
	if l.OnlyIf == "" {
		return true
	}
	i := r.Field(l.OnlyIf)
	return i >= 0 && f != nil && f.Bool(i)
}

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
// lives at Config.
type Reserve struct {
	Class  string
	Value  int
	Config string
}

// LaneHeaders name the headers of a lane's limit and in-flight count, each
// after Names.HeaderPrefix.
type LaneHeaders struct {
	Limit    string
	InFlight string
}

// Names are what capgate calls things on the wire and in its logs.
type Names struct {
	// HeaderPrefix starts every capacity header: "X-OCL-Capacity-" for OCL,
	// "Capgate-" for a generic policy.
	HeaderPrefix string
	// RateLimit sends the IETF RateLimit and RateLimit-Policy fields.
	RateLimit bool
	// RefusalDetail is the refusal body's "detail"; "{retry_after}" is
	// replaced by the seconds.
	RefusalDetail string
	// RefusalCode is the refusal body's "error_code".
	RefusalCode string
	// LogEvent is the per-call log line's "event".
	LogEvent string
	// MetadataHeader is the client-metadata header (a JSON object), and
	// AwareField its key that says the client handles refusals.
	MetadataHeader string
	AwareField     string
	// RequestSourceHeader names where the call came from, for the log line.
	RequestSourceHeader string
}
