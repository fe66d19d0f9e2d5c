// Package concurrency declares concurrency limits: at most To jobs that
// share a key hold a slot at once. It is pure Go; the store applies the
// rules inside its transactions.
//
// A job takes a slot when it becomes ready (at enqueue, or when the
// dispatcher promotes it). With no slot free it is blocked — kept, not
// claimable — until a slot is given back, or, with OnConflict: Discard, it
// is discarded at once (only as it becomes ready for the first time: a job
// that comes back, from an upstream 429 or a deferral, is blocked). A job
// gives its slot back when it finishes (completed, failed for good,
// cancelled) or while it waits on a rate limit; a retry keeps its slot
// while it waits. Each enqueue declares its kind's To, and so does a
// worker's start on every key of each limit it declares; a key's limit is
// the one most recently declared: a job that comes back takes a slot
// under it, not under the To it was enqueued with.
package concurrency

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicequeue/sluice/internal/keys"
)

// DefaultDuration is how long a key's slots go without activity, and a
// job runs from its claim, before the slot that running job holds is
// presumed lost.
const DefaultDuration = 3 * time.Minute

// OnConflict says what happens to a job that finds no slot free.
type OnConflict int

const (
	// Block keeps the job, not claimable, until a slot frees. The default.
	Block OnConflict = iota
	// Discard finishes the job at once as cancelled, with the reason,
	// when it becomes ready for the first time; a job that comes back
	// (from an upstream 429 or a deferral) is blocked instead.
	Discard
)

// String names the choice.
func (o OnConflict) String() string {
	if o == Discard {
		return "discard"
	}
	return "block"
}

// Limit declares a concurrency limit on the jobs of one kind, whose args
// are T.
type Limit[T any] struct {
	// Key says which jobs share slots, by the same rules as a rate limit's
	// Key: a string literal, or func(T) any / func(T) (any, error); nil
	// turns the limit off.
	Key any
	// To is how many jobs of one key hold a slot at once. Defaults to 1.
	To int
	// Group shares the slots between every kind that names it; the stored
	// key is "Group/key". Without it the slots belong to the kind. It (or,
	// without it, the kind) may not contain "/".
	Group string
	// Duration is how long a key's slots go without any activity before
	// those its running jobs hold are presumed lost (their process died)
	// and freed, each once its job has run for Duration since its claim;
	// a ready or scheduled job keeps its slot. Defaults to
	// DefaultDuration (3 minutes).
	Duration time.Duration
	// OnConflict is Block (the default) or Discard.
	OnConflict OnConflict
}

// Spec is a compiled limit without its type.
type Spec struct {
	// Scope is the key's first part: the group, or the kind.
	Scope string
	// To is how many jobs with one key may hold a slot at once.
	To int
	// Duration is how long a running job holds a slot, from its claim
	// and without other activity of its key, before the dispatcher frees
	// it (the declared Duration, or its default).
	Duration time.Duration
	// Discard drops a job that finds no free slot instead of blocking it.
	Discard bool
}

// Rule is a compiled Limit: its Spec and its key function.
type Rule[T any] struct {
	Spec
	key keys.Func[T]
}

// ErrInvalid is wrapped by every declaration error.
var ErrInvalid = errors.New("invalid concurrency limit")

// Compile checks a declaration for the kind. It returns a nil Rule when
// Key is nil, which turns the limit off.
func Compile[T any](kind string, l Limit[T]) (*Rule[T], error) {
	key, err := keys.Compile[T]("ConcurrencyLimit.Key", l.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if key == nil {
		return nil, nil
	}
	to := l.To
	switch {
	case to == 0:
		to = 1
	case to < 0 || to > math.MaxInt32:
		return nil, fmt.Errorf("%w: To is %d; it must be between 1 and %d", ErrInvalid, l.To, math.MaxInt32)
	}
	d := l.Duration
	switch {
	case d == 0:
		d = DefaultDuration
	case d < time.Second:
		return nil, fmt.Errorf("%w: Duration is %s; it must be at least 1s", ErrInvalid, l.Duration)
	}
	if l.OnConflict != Block && l.OnConflict != Discard {
		return nil, fmt.Errorf("%w: OnConflict is %d; use concurrency.Block or concurrency.Discard", ErrInvalid, l.OnConflict)
	}
	scope, err := keys.Scope("concurrency key", l.Group, kind, l.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Rule[T]{Spec: Spec{Scope: scope, To: to, Duration: d, Discard: l.OnConflict == Discard}, key: key}, nil
}

// SlotKey returns the stored key of the slots args take.
func (r *Rule[T]) SlotKey(args T) (string, error) {
	v, err := r.key(args)
	if err != nil {
		return "", err
	}
	return keys.Scoped(r.Scope, v), nil
}
