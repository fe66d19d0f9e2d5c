package engine

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
)

// State is where a job is in its life. Every job is in exactly one.
type State string

// The states a job moves through.
const (
	// StateReady jobs may be claimed now.
	StateReady State = "ready"
	// StateScheduled jobs wait for their run_at: a delayed enqueue, a
	// retry's backoff, a snooze, or a rate limit's next check.
	StateScheduled State = "scheduled"
	// StateParked jobs wait on a rate-limit budget whose slots are handed
	// out beyond the horizon; the dispatcher gives them slots in order as
	// the horizon advances.
	StateParked State = "parked"
	// StateBlocked jobs wait for a concurrency slot of their key; the next
	// slot given back goes to the first of them.
	StateBlocked State = "blocked"
	// StateRunning jobs are claimed by a live process.
	StateRunning State = "running"
	// StateCompleted jobs finished without error.
	StateCompleted State = "completed"
	// StateFailed jobs used up their attempts; they are kept with their
	// last error until retried or cleaned.
	StateFailed State = "failed"
	// StateCancelled jobs were discarded by their handler or an operator.
	StateCancelled State = "cancelled"
)

// States lists every state, in the order of a job's life.
var States = []State{StateReady, StateScheduled, StateParked, StateBlocked, StateRunning, StateCompleted, StateFailed, StateCancelled}

// ParseState checks a state's name.
func ParseState(s string) (State, error) {
	for _, st := range States {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown job state %q (one of %s)", s, joinStates(States))
}

func joinStates(ss []State) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Micros converts a time to the stored form: microseconds since the Unix
// epoch, rounded down.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// FromMicros converts a stored time back, in UTC.
func FromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Nanos converts a time to a budget's stored form: nanoseconds since the
// Unix epoch, which an int64 holds from 1677-09-21 to 2262-04-11. A time
// past them saturates (at ratelimit.Never after, the earliest int64
// before) instead of wrapping round: a clock past 2262 reads as the end
// of a budget's times, never as a time long past.
func Nanos(t time.Time) int64 {
	switch {
	case t.After(lastNanos):
		return math.MaxInt64
	case t.Before(firstNanos):
		return math.MinInt64
	}
	return t.UnixNano()
}

// firstNanos and lastNanos are the first and last times Nanos holds.
var (
	firstNanos = time.Unix(0, math.MinInt64)
	lastNanos  = time.Unix(0, math.MaxInt64)
)

// FromNanos converts a budget's stored time back, in UTC.
func FromNanos(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// MicrosNotBefore converts a time a job must not run before (its RunAt, a
// retry's or snooze's, a rate-limit slot) to the stored form, rounding up
// to the microsecond: a claim compares run_at with its now rounded down,
// so a job never runs before t. A time up to MaxRunAt, a whole
// microsecond, stays within it.
func MicrosNotBefore(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 > 0 {
		us++
	}
	return us
}

// microsAfter converts a budget's time (ns) to a job's (µs), rounding up
// (MicrosNotBefore): a job told to come back at a slot never comes back
// before it.
func microsAfter(ns int64) int64 { return MicrosNotBefore(FromNanos(ns)) }

// NewJob is a job to insert.
type NewJob struct {
	Kind        string
	Queue       string
	Priority    int
	Args        []byte
	MaxAttempts int
	// RunAt is when the job may first run; the zero time means now, and
	// a time not after now inserts the job ready.
	RunAt time.Time
	// RateKeys are the budgets the job draws on, each with its cost.
	RateKeys []RateKey
	// Conc is the job's concurrency limit, if its kind declares one.
	Conc *Conc
	// Coalesce is the job's coalescing rule, if its kind declares one.
	Coalesce *Coalesce
	// Metadata is stored with the job (see EncodeMetadata); nil for none.
	Metadata map[string]string
	// FairKey is the job's fairness key, if its kind declares one: claims
	// share the queue among keys by weight (docs/fairness.md).
	FairKey string
	// FairWeight is the key's weight, 1 to MaxFairWeight; 0 means 1.
	FairWeight int
}

// Coalesce is a job's coalescing rule and key: while a job holding Key is
// pending, this one joins it instead of being inserted.
type Coalesce struct {
	Key  string
	Rule coalesce.Spec
}

// Enqueued is what became of one enqueued job.
type Enqueued struct {
	// ID is the job's id: a new job's, or the pending job's it joined.
	ID int64
	// Joined is set when the call joined a pending job instead of adding
	// one.
	Joined bool
	// State is the job's state after the enqueue: ready or scheduled, or
	// blocked (no concurrency slot free), or cancelled (discarded by its
	// concurrency limit).
	State State
}

// Conc is a job's concurrency limit: at most To jobs of Key hold a slot
// at once.
type Conc struct {
	Key      string
	To       int
	Duration time.Duration
	// Discard finishes the job as cancelled when no slot is free, instead
	// of blocking it.
	Discard bool
}

// RateKey is one budget a job draws on.
type RateKey struct {
	Key  string
	Cost int
}

// EncodeRateKeys packs a job's budgets into their stored form: one per
// line, a cost above 1 after a tab.
func EncodeRateKeys(keys []RateKey) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k.Key)
		if k.Cost > 1 {
			b.WriteByte('\t')
			b.WriteString(strconv.Itoa(k.Cost))
		}
	}
	return b.String()
}

// DecodeRateKeys reverses EncodeRateKeys.
func DecodeRateKeys(s string) []RateKey {
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	out := make([]RateKey, 0, len(lines))
	for _, l := range lines {
		k := RateKey{Key: l, Cost: 1}
		if i := strings.LastIndexByte(l, '\t'); i >= 0 {
			if c, err := strconv.Atoi(l[i+1:]); err == nil && c > 0 {
				k = RateKey{Key: l[:i], Cost: c}
			}
		}
		out = append(out, k)
	}
	return out
}

// Job is a stored job, as a claim returns it.
type Job struct {
	ID          int64
	Kind        string
	Queue       string
	Priority    int
	Args        []byte
	Attempt     int
	MaxAttempts int
	// Claims counts the job's claims, this one included: unlike Attempt,
	// which a snooze, a 429 or a release gives back, it never goes back,
	// so it names the run (Run.Claim).
	Claims    int64
	CreatedAt time.Time
	RunAt     time.Time
	RateKeys  []RateKey
	// ConcKey is the job's concurrency key, and HoldsSlot whether it holds
	// one of the key's slots.
	ConcKey   string
	HoldsSlot bool
	// Calls counts the calls the job collected (1 for most jobs), and
	// CallArgs holds every call's args, oldest first, when it is more
	// than one; Args is the first.
	Calls    int
	CallArgs [][]byte
	// WaitKey is the rate-limit budget the job waits on (scheduled or
	// parked), or waited on until it became ready again; empty otherwise.
	WaitKey string
	// Metadata is the job's metadata as stored: a JSON object of strings
	// (DecodeMetadata), or "" for none.
	Metadata string
	// Deferrals counts the times a claim deferred the job on a rate limit
	// (to a slot, or parked), over its whole life.
	Deferrals int
	// DeferralReason says why the last deferral happened ("rate limit"
	// and the budget key); empty when the job was never deferred.
	DeferralReason string
	// DeferredAt is when the job's current wait on rate limits began: its
	// first deferral since it last ran. Zero when it has not been deferred
	// since.
	DeferredAt time.Time
	// ClaimedAt is when the claim that returned the job took it, on the
	// claim's clock; zero outside a claim.
	ClaimedAt time.Time
	// Hold is how long after its claim the job must wait before it runs:
	// the claim admitted it under a limit as of a slot a moment ahead
	// (ClaimResult.Ahead). Zero outside a claim, and for most jobs.
	Hold time.Duration
}

// Run is the run this claim of the job makes: what its result or release
// names (Outcomes, Store.Release).
func (j *Job) Run() Run { return Run{ID: j.ID, Claim: j.Claims} }

// JobInfo is a stored job with everything an operator may want to see.
type JobInfo struct {
	Job
	State       State
	AttemptedAt time.Time
	FinishedAt  time.Time
	ProcessID   int64
	LastError   string
	// Conc is the job's concurrency limit, nil without one.
	Conc *Conc
	// FairKey is the job's fairness key ("" without one), and FairStart
	// its virtual start (docs/fairness.md).
	FairKey   string
	FairStart int64
}

// Transition moves one job to a new state, as a handler's outcome or a
// claim's deferral decides.
type Transition struct {
	ID    int64
	State State
	// RunAt is the new run time for scheduled jobs; zero keeps it, except
	// for a scheduled transition, whose run time is then Wait after the
	// time Finish reads in its transaction (the database's clock when it
	// decides on it): a snooze, a backoff or an upstream's wait lasts as
	// long as asked however far the worker's clock is off.
	RunAt time.Time
	// Wait is how long a scheduled transition with no RunAt waits.
	Wait time.Duration
	// WaitKey names the rate-limit budget a deferred job waits on.
	WaitKey string
	// Error is recorded as the job's last error; empty keeps the old one.
	// A give-back's mark in it is quoted (LastErrorText), but in Record.
	Error string
	// Record is set for a give-back (the jobs package's): the record of
	// its streak, which Error holds and is kept as written, so that the
	// job's next give-back reads it back. No other transition sets it.
	Record string
	// AttemptDelta is added to the attempt count: -1 gives back the
	// attempt a claim counted (snooze, release).
	AttemptDelta int
	// Finished stamps finished_at with the transition's time.
	Finished bool
	// Claim is, for the outcome of a run (Finish, Release), the claim the
	// run was made by (Job.Claims as claimed): the job moves only while it
	// still runs under it. Transitions that name no process (of jobs the
	// caller has locked) ignore it.
	Claim int64
}
