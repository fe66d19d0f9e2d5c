// Package coalesce declares coalescing: while a job with key K is pending
// (ready, scheduled, parked on a rate limit, or blocked on a concurrency
// slot), every further enqueue with K joins it instead of adding a job.
// The key is held until a worker claims the job; a call after that starts
// a new pending job. It is pure Go; the store applies the rules inside the
// enqueuer's transaction.
package coalesce

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/internal/keys"
)

// OnConflict says what a call that joins a pending job does to it.
type OnConflict int

const (
	// Discard keeps the pending job's args and drops the new call's. The
	// default.
	Discard OnConflict = iota
	// Replace gives the pending job the newest call's args.
	Replace
	// Collect appends each call's args to the pending job; its handler
	// receives every call (register it with jobs.RegisterCalls), and a
	// retry runs all of them again.
	Collect
)

// String names the choice.
func (o OnConflict) String() string {
	switch o {
	case Replace:
		return "replace"
	case Collect:
		return "collect"
	}
	return "discard"
}

// OnFull says what becomes of a Collect job that reaches MaxCalls.
type OnFull int

const (
	// Wait leaves a full job to run when its time comes. The default.
	Wait OnFull = iota
	// Dispatch makes a full job that is waiting (debounced, or on its rate
	// limit) ready at once; a rate limit may send it back to wait.
	Dispatch
)

// Rule declares coalescing for the jobs of one kind, whose args are T.
type Rule[T any] struct {
	// Key says which calls coalesce, by the same rules as a rate limit's
	// Key: a string literal, or func(T) any / func(T) (any, error); nil
	// turns coalescing off.
	Key any
	// Group shares keys between every kind that names it; the stored key
	// is "Group/key". Without it the keys belong to the kind. It (or,
	// without it, the kind) may not contain "/". Only Discard keys are
	// shared, and the kinds of one Group declare one Debounce and
	// MaxDelay: registration refuses a kind that does not agree with one
	// registered before.
	Group string
	// OnConflict is Discard (the default), Replace or Collect.
	OnConflict OnConflict
	// MaxCalls, with Collect, is how many calls one job holds; the next
	// call starts a new pending job. 0 means no limit; 1 is refused.
	MaxCalls int
	// OnFull, with MaxCalls, is Wait (the default) or Dispatch.
	OnFull OnFull
	// Debounce delays the job to d after the latest call (trailing edge):
	// every call moves it to now + d, but never earlier than the time its
	// rate limit gave it. A call moves a job blocked on its concurrency
	// slot back to scheduled too; it does not move a job parked on its
	// rate limit, which runs when its budget hands it a slot.
	Debounce time.Duration
	// MaxDelay, with Debounce, caps how far calls can push the job: it runs
	// at most MaxDelay after the first call, even under a steady stream.
	MaxDelay time.Duration
}

// Spec is a compiled rule without its type.
type Spec struct {
	// Scope is the key's first part: the group, or the kind.
	Scope string
	// OnConflict is what a call does to the pending job it finds.
	OnConflict OnConflict
	// MaxCalls is how many calls one job collects (0: no cap).
	MaxCalls int
	// Dispatch makes the job run at once when it is full, instead of
	// the next call waiting for a new job.
	Dispatch bool
	// Debounce delays the job this long after each call (0: none).
	Debounce time.Duration
	// MaxDelay bounds the debounce: at most this long after the first
	// call (0: no bound).
	MaxDelay time.Duration
}

// Compiled is a compiled Rule: its Spec and its key function.
type Compiled[T any] struct {
	Spec
	key keys.Func[T]
}

// ErrInvalid is wrapped by every declaration error.
var ErrInvalid = errors.New("invalid coalesce rule")

// Compile checks a rule for the kind. It returns nil when Key is nil, which
// turns coalescing off.
func Compile[T any](kind string, r Rule[T]) (*Compiled[T], error) {
	key, err := keys.Compile[T]("Coalesce.Key", r.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if key == nil {
		return nil, nil
	}
	switch {
	case r.OnConflict < Discard || r.OnConflict > Collect:
		return nil, fmt.Errorf("%w: OnConflict is %d; use coalesce.Discard, Replace or Collect", ErrInvalid, r.OnConflict)
	case r.MaxCalls < 0:
		return nil, fmt.Errorf("%w: MaxCalls is %d; it must not be negative", ErrInvalid, r.MaxCalls)
	case r.MaxCalls == 1:
		return nil, fmt.Errorf("%w: MaxCalls is 1: a job would hold only the call that creates it, so no call would coalesce; allow 2 or more, or leave Coalesce off", ErrInvalid)
	case r.MaxCalls > 0 && r.OnConflict != Collect:
		return nil, fmt.Errorf("%w: MaxCalls needs OnConflict: Collect (a %s job holds one call)", ErrInvalid, r.OnConflict)
	case r.OnFull != Wait && r.OnFull != Dispatch:
		return nil, fmt.Errorf("%w: OnFull is %d; use coalesce.Wait or coalesce.Dispatch", ErrInvalid, r.OnFull)
	case r.OnFull == Dispatch && r.MaxCalls == 0:
		return nil, fmt.Errorf("%w: OnFull: Dispatch needs MaxCalls (a job without it is never full)", ErrInvalid)
	case r.Debounce < 0:
		return nil, fmt.Errorf("%w: Debounce is %s; it must not be negative", ErrInvalid, r.Debounce)
	case r.MaxDelay < 0:
		return nil, fmt.Errorf("%w: MaxDelay is %s; it must not be negative", ErrInvalid, r.MaxDelay)
	case r.MaxDelay > 0 && r.Debounce == 0:
		return nil, fmt.Errorf("%w: MaxDelay needs Debounce (without it a job is never delayed)", ErrInvalid)
	case r.MaxDelay > 0 && r.MaxDelay < r.Debounce:
		return nil, fmt.Errorf("%w: MaxDelay (%s) is shorter than Debounce (%s)", ErrInvalid, r.MaxDelay, r.Debounce)
	}
	scope, err := keys.Scope("coalesce key", r.Group, kind, r.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Compiled[T]{Spec: Spec{
		Scope: scope, OnConflict: r.OnConflict, MaxCalls: r.MaxCalls, Dispatch: r.OnFull == Dispatch,
		Debounce: r.Debounce, MaxDelay: r.MaxDelay,
	}, key: key}, nil
}

// CoalesceKey returns the stored key of the pending job args join.
func (c *Compiled[T]) CoalesceKey(args T) (string, error) {
	v, err := c.key(args)
	if err != nil {
		return "", err
	}
	return keys.Scoped(c.Scope, v), nil
}

// RunAt is when a debounced job runs after a call at now, given the first
// call's time and the slot its rate limit gave it (zero for none): now +
// Debounce, capped at first + MaxDelay, and never before the slot.
func (s Spec) RunAt(now, first, rateSlot time.Time) time.Time {
	at := now.Add(s.Debounce)
	if s.MaxDelay > 0 {
		if limit := first.Add(s.MaxDelay); at.After(limit) {
			at = limit
		}
	}
	if at.Before(rateSlot) {
		at = rateSlot
	}
	return at
}
