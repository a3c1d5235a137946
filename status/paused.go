package status

import "strings"

// Paused is a lane a config pauses: a limit of 0, for one tier or for
// every caller. A paused lane refuses the calls that take it in enforce
// (Retry-After retry_after.paused); in shadow they go ahead,
// shadow-refused. Gate.Status lists them, so an operator sees a pause as a
// pause, not as a 0 in the config.
type Paused struct {
	Lane string `json:"lane"`
	// Tier is the one tier whose limit is 0; "" for every tier.
	Tier string `json:"tier,omitempty"`
	// Except is a class of calls the pause lets through: the lane's
	// reserve, when only the limit of the others (limit − reserve) is 0.
	Except string `json:"except,omitempty"`
	// Routes are the routes whose calls take the lane (their log names).
	Routes []string `json:"routes"`
	// OnlyIf is the bool field a call needs to take the lane; "" any call
	// of Routes.
	OnlyIf string `json:"only_if,omitempty"`
	// Refuses says in words whose calls it refuses (in enforce), such as
	// "chat and embeddings calls of tier free".
	Refuses string `json:"refuses"`
}

// PausedRefuses says whose calls a pause of lane refuses, in words.
func PausedRefuses(routes []string, onlyIf, tier, except string) string {
	var b strings.Builder
	switch len(routes) {
	case 0:
		b.WriteString("no calls")
	case 1:
		b.WriteString(routes[0])
	default:
		b.WriteString(strings.Join(routes[:len(routes)-1], ", "))
		b.WriteString(" and ")
		b.WriteString(routes[len(routes)-1])
	}
	b.WriteString(" calls")
	if onlyIf != "" {
		b.WriteString(" with " + onlyIf)
	}
	if except != "" {
		b.WriteString(" (but " + except + " ones)")
	}
	if tier != "" {
		b.WriteString(" of tier " + tier)
	} else {
		b.WriteString(" of every caller")
	}
	return b.String()
}

// Enforced says who the config refuses when a lane is full, from a mode
// and an enforce_for: "none" outside enforce (enforce_for then applies to
// nothing), else "aware" (only the clients that say they are capacity
// aware) or "all". The status JSON carries it beside mode and enforce_for
// so the two never read as a contradiction ("shadow, enforced for all").
func Enforced(mode, enforceFor string) string {
	if mode != "enforce" {
		return "none"
	}
	return enforceFor
}
