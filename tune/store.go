package tune

import (
	"context"
	"time"
)

// Store is an optional part of a lane store (memory.Store and redis.Store
// have it): the samples and state of the adaptive limits, shared by the
// gateways so that each lane's limit is computed once for the cluster. Its
// keys are package adaptive's, one per lane (<prefix>:tune:<lane>[:<task>]).
type Store interface {
	// TuneExchange adds add to the window being gathered for key. When
	// every has passed by the store's clock since a window of key was last
	// taken (or none ever was), it also takes the window: it returns it
	// with Due set and starts a new one, so one gateway of the cluster gets
	// it. It always returns the state last saved for key (nil: none).
	// Errors are the store's failures.
	TuneExchange(ctx context.Context, key string, add Window, every time.Duration) (Round, error)
	// TuneSave keeps state as key's state. The state lives for StateTTL
	// after its last exchange or save.
	TuneSave(ctx context.Context, key string, state []byte) error
}

// Round is what TuneExchange returns.
type Round struct {
	State  []byte // the state last saved; nil when none
	Due    bool   // the window was taken: the caller takes the step
	Window Window // the window taken, when Due
}

// StateTTL is how long the store keeps a lane's state after it was last
// used: long enough to outlive a restart of every gateway, short enough
// that a lane no longer adaptive leaves nothing for ever.
const StateTTL = 7 * 24 * time.Hour
