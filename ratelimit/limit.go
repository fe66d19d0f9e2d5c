package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/internal/keys"
)

// Bounds of a declaration.
const (
	// MinInterval is the shortest emission interval Per / (To − Burst + 1)
	// a limit may have: a million admissions a second on one budget.
	MinInterval = time.Microsecond
	// MaxTo is the largest To (and Burst) a limit may declare; the stored
	// counts are 32-bit on every database.
	MaxTo = math.MaxInt32
	// MaxDebt is the longest a budget may owe: Burst × the emission
	// interval, which is how far ahead of now a budget's state reaches.
	// Times are nanoseconds since 1970 in 64 bits (good until 2262), so a
	// limit that could push a budget's state further than this is
	// refused rather than left to overflow.
	MaxDebt = 100 * 365 * 24 * time.Hour
	// MaxPer is the longest window a limit may declare.
	MaxPer = MaxDebt
)

// Limit declares a rate limit on the jobs of one kind, whose args are T.
//
// At most To jobs that share a budget are claimed in any window of Per,
// starting at any moment; a quiet budget admits Burst of them at once, and
// a backlog drains at To − Burst + 1 per Per.
type Limit[T any] struct {
	// To is how many jobs any window of Per admits. 0 pauses the limit:
	// nothing it covers is admitted, and nothing is lost.
	To int
	// Per is the length of the window. Required.
	Per time.Duration
	// Burst is how many jobs a quiet budget admits at once, 1 ≤ Burst ≤ To
	// (at most MaxTo when To is 0, a pause). Defaults to 1.
	// Burst × Per / (To − Burst + 1) may not exceed MaxDebt (100 years).
	Burst int
	// Key says which jobs share a budget:
	//
	//   - a string literal such as "global": one budget for the whole kind
	//     (or group), stored as "Kind/global";
	//   - func(T) any or func(T) (any, error): a budget per value, joined
	//     into a string (see the package keys rules: a struct with an ID
	//     field gives "Type/id", a slice's items are joined with "/", a
	//     time.Time its instant in UTC, RFC 3339 with nanoseconds, an
	//     empty result gives the bare kind's or group's budget);
	//   - nil: the limit is off.
	Key any
	// Group shares one budget between every kind that names it; the stored
	// key is "Group/key". Without it the budget belongs to the kind. It
	// (or, without it, the kind) may not contain "/".
	Group string
	// Cost charges a job more than one token, computed from its args at
	// enqueue (for example the number of items in a bulk call). A cost
	// above Burst could never be admitted and is refused at enqueue, as is
	// a job whose Cost panics (with an error naming it). Defaults to 1 for
	// every job.
	Cost func(T) int
	// Shadow computes and records every decision, and lets the job run
	// anyway. The budget's state advances as if the limit were enforced.
	Shadow bool
}

// Spec is a compiled limit without its type: what the claim needs.
type Spec struct {
	// Scope is the budget key's first part: the group, or the kind.
	Scope string
	// To is how many claims any window of Per admits, as declared.
	To int
	// Per is the window, as declared.
	Per time.Duration
	// Burst is how many a quiet budget admits at once (1 when the
	// declaration left it 0).
	Burst int
	// Params is the limit reduced for the math.
	Params Params
	// Shadow is set when decisions are recorded but not enforced.
	Shadow bool
}

// String describes the limit as "100/1m0s burst 10".
func (s Spec) String() string {
	return fmt.Sprintf("%d/%s burst %d", s.To, s.Per, s.Burst)
}

// Rule is a compiled Limit: its Spec and the functions that compute a
// job's budget key and cost.
type Rule[T any] struct {
	Spec
	key  keys.Func[T]
	cost func(T) int
}

// ErrInvalid is wrapped by every declaration error.
var ErrInvalid = errors.New("invalid rate limit")

// NewParams reduces To per Per with the given burst for the math, checking
// every field, and returns the params and the burst (0 means the default,
// 1). Every error names the field and says what is allowed.
func NewParams(to int, per time.Duration, burst int) (Params, int, error) {
	if burst == 0 {
		burst = 1
	}
	switch {
	case to < 0:
		return Params{}, 0, fmt.Errorf("%w: To is %d; it must be positive, or 0 to pause", ErrInvalid, to)
	case to > MaxTo:
		return Params{}, 0, fmt.Errorf("%w: To is %d; it may be at most %d", ErrInvalid, to, MaxTo)
	case per <= 0:
		return Params{}, 0, fmt.Errorf("%w: Per is %s; it must be a positive duration", ErrInvalid, per)
	case per > MaxPer:
		return Params{}, 0, fmt.Errorf("%w: Per is %s; it may be at most %s (100 years)", ErrInvalid, per, MaxPer)
	case burst < 1 || burst > MaxTo:
		// Checked for a paused limit too: its burst is stored, and applies
		// once the pause is lifted.
		return Params{}, 0, fmt.Errorf("%w: Burst is %d; it must be at least 1 (0 means 1) and at most %d", ErrInvalid, burst, MaxTo)
	case to == 0:
		return Params{Interval: per.Nanoseconds(), Burst: 0, Paused: true}, burst, nil
	case burst < 1 || burst > to:
		return Params{}, 0, fmt.Errorf("%w: Burst is %d; it must be between 1 and To (%d)", ErrInvalid, burst, to)
	}
	n := int64(to - burst + 1)
	// Round up to the nanosecond: a longer interval can never admit early.
	perNanos := per.Nanoseconds()
	interval := perNanos / n
	if perNanos%n != 0 {
		interval++
	}
	if interval < MinInterval.Nanoseconds() {
		return Params{}, 0, fmt.Errorf("%w: Per/(To-Burst+1) is %s; it must be at least %s (at most a million per second)",
			ErrInvalid, time.Duration(interval), MinInterval)
	}
	if interval > MaxDebt.Nanoseconds()/int64(burst) {
		return Params{}, 0, fmt.Errorf("%w: Burst × Per/(To-Burst+1) is %d × %s, more than a budget may owe (%s, 100 years); lower Burst or Per",
			ErrInvalid, burst, time.Duration(interval), MaxDebt)
	}
	return Params{Interval: interval, Burst: burst}, burst, nil
}

// Compile checks a declaration for the kind and compiles it. It returns a
// nil Rule (and no error) when Key is nil, which turns the limit off.
func Compile[T any](kind string, l Limit[T]) (*Rule[T], error) {
	key, err := keys.Compile[T]("RateLimit.Key", l.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if key == nil {
		return nil, nil
	}
	params, burst, err := NewParams(l.To, l.Per, l.Burst)
	if err != nil {
		return nil, err
	}
	scope, err := keys.Scope("rate-limit key", l.Group, kind, l.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkReserved(scope); err != nil {
		return nil, err
	}
	return &Rule[T]{
		Spec: Spec{Scope: scope, To: l.To, Per: l.Per, Burst: burst, Params: params, Shadow: l.Shadow},
		key:  key,
		cost: l.Cost,
	}, nil
}

// CheckScope refuses a scope that cannot start a budget key: empty,
// starting with "@" (kept for queue limits' "@queue"), or refused by the
// rule of every key's scope (see keys.CheckScope: at most 255 bytes of
// valid UTF-8, without control characters, a trailing space or "/").
func CheckScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("%w: Group is empty and so is the kind", ErrInvalid)
	}
	if err := checkReserved(scope); err != nil {
		return err
	}
	if err := keys.CheckScope("scope", scope); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// checkReserved refuses a scope starting with "@", which is kept for
// queue limits ("@queue/NAME").
func checkReserved(scope string) error {
	if strings.HasPrefix(scope, "@") {
		return fmt.Errorf("%w: scope %s starts with \"@\", which is kept for queue limits (\"@queue/NAME\"); name a Group without it", ErrInvalid, keys.Preview(scope))
	}
	return nil
}

// BudgetKey returns the stored key of the budget that args draw on.
func (r *Rule[T]) BudgetKey(args T) (string, error) {
	v, err := r.key(args)
	if err != nil {
		return "", err
	}
	return keys.Scoped(r.Scope, v), nil
}

// Cost returns what admitting a job with these args charges, checked
// against the burst. A Cost function that panics returns an error with
// the panic, as a key function does.
func (r *Rule[T]) Cost(args T) (c int, err error) {
	if r.cost == nil {
		return 1, nil
	}
	defer func() {
		if p := recover(); p != nil {
			c, err = 0, fmt.Errorf("rate limit %s: RateLimit.Cost: cost function panicked: %v", r.Scope, p)
		}
	}()
	c = r.cost(args)
	switch {
	case c < 1:
		return 0, fmt.Errorf("rate limit %s: cost is %d; it must be at least 1", r.Scope, c)
	case !r.Params.Paused && !r.Shadow && c > r.Burst:
		// A shadow limit refuses nothing: such a job runs, recorded as one
		// it would defer.
		return 0, &CostError{Scope: r.Scope, Cost: c, Burst: r.Burst}
	}
	return c, nil
}

// CostError is Cost's error for a cost above the limit's burst: a job that
// costs more than the burst could never be admitted under the limit.
type CostError struct {
	// Scope is the limit's scope (a kind, a group, or "@queue").
	Scope string
	// Cost is what the job costs, Burst the limit's burst.
	Cost, Burst int
}

func (e *CostError) Error() string {
	return fmt.Sprintf("rate limit %s: cost %d is above the burst (%d), so the job could never be admitted", e.Scope, e.Cost, e.Burst)
}

// ScopeOf returns the scope part of a stored budget key.
func ScopeOf(budgetKey string) string {
	if i := strings.IndexByte(budgetKey, '/'); i >= 0 {
		return budgetKey[:i]
	}
	return budgetKey
}

// QueueLimit declares a rate limit on a whole queue: every job claimed
// from it, whatever its kind, draws on the queue's one budget, stored as
// "@queue/NAME", on top of its kind's own limits.
type QueueLimit struct {
	// To is how many claims from the queue any window of Per admits; 0
	// pauses the queue's limited claims. Required.
	To int
	// Per is the window. Required, positive.
	Per time.Duration
	// Burst is how many a quiet queue admits at once, 1..To; 0 means 1.
	Burst int
	// Shadow records the limit's decisions without enforcing them.
	// Default false.
	Shadow bool
}

// Compile checks a queue limit.
func (q QueueLimit) Compile(queue string) (Spec, error) {
	if queue == "" {
		return Spec{}, fmt.Errorf("%w: the queue name is empty", ErrInvalid)
	}
	p, burst, err := NewParams(q.To, q.Per, q.Burst)
	if err != nil {
		return Spec{}, err
	}
	return Spec{Scope: "@queue", To: q.To, Per: q.Per, Burst: burst, Params: p, Shadow: q.Shadow}, nil
}

// Where a backlog's drain rate is promised: a worker admits a waiting job
// within a few milliseconds of its slot, which a burst of 2 or more absorbs
// when the emission interval is at least MinPreciseInterval, and a burst of
// 1 (no slack at all) when it is at least MinPreciseIntervalBurst1. Below
// them the bound (at most To in any window of Per) still holds, but a
// backlog drains more slowly than To − Burst + 1 per Per.
const (
	MinPreciseInterval       = 10 * time.Millisecond
	MinPreciseIntervalBurst1 = 50 * time.Millisecond
)

// DrainsSlowly reports whether the burst takes so much of To that a
// backlog, once the burst is spent, drains at less than half of To per
// Per (it drains at To − Burst + 1), and says so. "100 a minute, 100 at
// once" admits 100 at once and then one a minute.
func (s Spec) DrainsSlowly() (bool, string) {
	if s.Params.Paused || 2*(s.To-s.Burst+1) >= s.To {
		return false, ""
	}
	return true, fmt.Sprintf("its burst is %d of %d, so once it is spent a backlog drains at %d per %s (To − Burst + 1); a smaller burst drains faster, and the bound is To in any window of Per either way",
		s.Burst, s.To, s.To-s.Burst+1, s.Per)
}

// DrainPrecise reports whether a backlog under the limit drains at its
// declared rate (within 2%, or 5% with a burst of 1), and if not, why.
func (s Spec) DrainPrecise() (bool, string) {
	if s.Params.Paused {
		return true, ""
	}
	t := time.Duration(s.Params.Interval)
	switch {
	case s.Burst == 1 && t < MinPreciseIntervalBurst1:
		return false, fmt.Sprintf("its emission interval is %s with burst 1; a backlog drains at its declared rate only from %s (or with a burst of 2 or more, from %s)",
			t, MinPreciseIntervalBurst1, MinPreciseInterval)
	case s.Burst > 1 && t < MinPreciseInterval:
		return false, fmt.Sprintf("its emission interval is %s; a backlog drains at its declared rate only from %s", t, MinPreciseInterval)
	}
	return true, ""
}
