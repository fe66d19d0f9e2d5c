package jobs

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Defaults for a kind that does not say otherwise.
const (
	// DefaultQueue is the queue jobs go to.
	DefaultQueue = "default"
	// DefaultMaxAttempts is how many runs a job gets.
	DefaultMaxAttempts = 25
)

// RegisterOption configures a kind at registration.
type RegisterOption interface {
	applyRegister(*kindConfig) error
}

// EnqueueOption configures one enqueued job.
type EnqueueOption interface {
	applyEnqueue(*enqueueConfig) error
}

// Option configures both: at registration it sets the kind's default, at
// enqueue it overrides it for one job.
type Option interface {
	RegisterOption
	EnqueueOption
}

// kindConfig is what registration options set.
type kindConfig struct {
	queue       string
	priority    int
	maxAttempts int
	timeout     time.Duration
	backoff     func(attempt int) time.Duration
	rateLimits  []any // ratelimit.Limit[T] for the kind's T, checked at Register
	concurrency []any // concurrency.Limit[T]
	coalesce    []any // coalesce.Rule[T]
	fair        []any // func(T) any
	fairWeight  []any // func(T) int
	middleware  []Middleware
}

// enqueueConfig is what enqueue options set; zero fields take the kind's.
type enqueueConfig struct {
	queue       string
	priority    *int
	maxAttempts int
	runAt       time.Time
	delay       time.Duration
	// runAtSet and delaySet say whether RunAt and Delay were given: not
	// both (see RunAt).
	runAtSet, delaySet bool
	metadata           map[string]string
}

type queueOption string

// Queue puts jobs in the named queue. Defaults to "default".
func Queue(name string) Option { return queueOption(name) }

func (q queueOption) check() error {
	if q == "" {
		return errors.New("Queue: the name is empty")
	}
	return engine.CheckQueue("Queue", string(q))
}
func (q queueOption) applyRegister(c *kindConfig) error { c.queue = string(q); return q.check() }
func (q queueOption) applyEnqueue(c *enqueueConfig) error {
	c.queue = string(q)
	return q.check()
}

type priorityOption int

// Priority orders jobs within a queue: lower runs first. It must fit 32
// bits (math.MinInt32 to math.MaxInt32), as the priority column does on
// every database. Defaults to 0.
func Priority(p int) Option { return priorityOption(p) }

func (p priorityOption) check() error {
	if p < math.MinInt32 || p > math.MaxInt32 {
		return fmt.Errorf("Priority is %d; it must be between %d and %d", int(p), math.MinInt32, math.MaxInt32)
	}
	return nil
}
func (p priorityOption) applyRegister(c *kindConfig) error { c.priority = int(p); return p.check() }
func (p priorityOption) applyEnqueue(c *enqueueConfig) error {
	v := int(p)
	c.priority = &v
	return p.check()
}

type maxAttemptsOption int

// MaxAttempts is how many runs a job gets before it is kept as failed:
// 1 to math.MaxInt32. Defaults to 25.
func MaxAttempts(n int) Option { return maxAttemptsOption(n) }

func (m maxAttemptsOption) check() error {
	if m < 1 || m > math.MaxInt32 {
		return fmt.Errorf("MaxAttempts is %d; it must be between 1 and %d", int(m), math.MaxInt32)
	}
	return nil
}
func (m maxAttemptsOption) applyRegister(c *kindConfig) error {
	c.maxAttempts = int(m)
	return m.check()
}
func (m maxAttemptsOption) applyEnqueue(c *enqueueConfig) error {
	c.maxAttempts = int(m)
	return m.check()
}

type timeoutOption time.Duration

// Timeout bounds one run of the kind's jobs: the handler's context is
// cancelled when it passes. Overrides the worker's JobTimeout; a negative
// value means no timeout.
func Timeout(d time.Duration) RegisterOption { return timeoutOption(d) }

func (t timeoutOption) applyRegister(c *kindConfig) error {
	if t == 0 {
		return errors.New("Timeout is 0; give a positive duration, or a negative one for none")
	}
	c.timeout = time.Duration(t)
	return nil
}

type backoffOption func(int) time.Duration

// Backoff replaces the retry delay after a failed attempt (1 for the first
// failure), used as returned (0 retries at once), within bounds: a delay
// longer than MaxBackoff (a year), or than what reaches the end of the year
// 9999 (the latest time a job may run at), is cut to it. Defaults to
// DefaultBackoff with ±10% jitter, which is also the delay of a retry whose
// Backoff panicked (the panic is logged with its stack) or returned a
// negative delay (an exponential that overflowed, say; so that the job does
// not run again at once, attempt after attempt). A delay out of range is
// logged once per kind, as a warning.
func Backoff(f func(attempt int) time.Duration) RegisterOption { return backoffOption(f) }

func (b backoffOption) applyRegister(c *kindConfig) error {
	if b == nil {
		return errors.New("Backoff is nil")
	}
	c.backoff = b
	return nil
}

type rateLimitOption struct{ limit any }

// RateLimit limits how often the kind's jobs are claimed; see package
// ratelimit. A kind may declare several limits (say, per minute and per
// day): a job is admitted only when every one has room.
func RateLimit[T Args](l ratelimit.Limit[T]) RegisterOption { return rateLimitOption{limit: l} }

func (r rateLimitOption) applyRegister(c *kindConfig) error {
	c.rateLimits = append(c.rateLimits, r.limit)
	return nil
}

type concurrencyOption struct{ limit any }

// ConcurrencyLimit lets at most To jobs of one key hold a slot (run, or
// wait for a retry) at once; see package concurrency. A kind declares one.
func ConcurrencyLimit[T Args](l concurrency.Limit[T]) RegisterOption {
	return concurrencyOption{limit: l}
}

func (c concurrencyOption) applyRegister(k *kindConfig) error {
	k.concurrency = append(k.concurrency, c.limit)
	return nil
}

type coalesceOption struct{ rule any }

// Coalesce makes calls with one key share one pending job; see package
// coalesce. A kind declares one rule. With OnConflict: Collect, register
// the kind with RegisterCalls, whose handler receives every call.
func Coalesce[T Args](r coalesce.Rule[T]) RegisterOption { return coalesceOption{rule: r} }

func (c coalesceOption) applyRegister(k *kindConfig) error {
	k.coalesce = append(k.coalesce, c.rule)
	return nil
}

type runAtOption time.Time

// RunAt schedules the job to run no earlier than t. A time that is not
// after now (or the zero time) runs the job now. t must not be after the
// end of the year 9999 (engine.MaxRunAt), nor, for a job that draws on a
// rate-limit budget (its kind's or its queue's), after
// 2262-04-11T23:47:16Z, the last time a budget's nanoseconds hold (the
// enqueue is refused, naming the budget). An enqueue given both RunAt and
// Delay is refused, naming both, whatever their values: neither would be
// obviously the one meant (for a delay after a time, pass RunAt(t.Add(d))).
func RunAt(t time.Time) EnqueueOption { return runAtOption(t) }

func (r runAtOption) applyEnqueue(c *enqueueConfig) error {
	if t := time.Time(r); t.After(engine.MaxRunAt) {
		return fmt.Errorf("RunAt is %s; it must not be after %s", t.UTC().Format(time.RFC3339), engine.MaxRunAt.Format(time.RFC3339))
	}
	c.runAt, c.runAtSet = time.Time(r), true
	return nil
}

type delayOption time.Duration

// Delay schedules the job to run no earlier than d from now. A negative d
// is refused (it is more likely a bug than a wish to run now; pass 0, or
// no option, for now), and so is a d that lands after the end of the year
// 9999, or a Delay given with RunAt (see there).
func Delay(d time.Duration) EnqueueOption { return delayOption(d) }

func (d delayOption) applyEnqueue(c *enqueueConfig) error {
	if d < 0 {
		return fmt.Errorf("Delay is %s; it must not be negative", time.Duration(d))
	}
	c.delay, c.delaySet = time.Duration(d), true
	return nil
}
