package jobs

import (
	"context"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/human"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

// Reason says, in one word, why a job is not running.
type Reason string

// The reasons Explain gives.
const (
	// ReasonReady: the job may be claimed now and waits for a free worker.
	ReasonReady Reason = "ready"
	// ReasonQueuePaused: the job's queue is paused.
	ReasonQueuePaused Reason = "queue_paused"
	// ReasonRateLimited: a rate limit deferred the job, which holds a
	// slot (a time to come back) on the budget; or an upstream refused it
	// (RetryAfter), and it waits out the upstream's time, before which its
	// budgets admit nothing.
	ReasonRateLimited Reason = "rate_limited"
	// ReasonParked: a rate limit deferred the job beyond the horizon; it
	// waits for a slot among the budget's parked jobs.
	ReasonParked Reason = "parked"
	// ReasonBlocked: the job waits for a slot of its concurrency key.
	ReasonBlocked Reason = "blocked"
	// ReasonRetryBackoff: an attempt failed and the job waits out its
	// backoff (or a snooze).
	ReasonRetryBackoff Reason = "retry_backoff"
	// ReasonGivenBack: a worker that could not run the job as stored (no
	// handler for its kind there, or one that would not read its collected
	// calls: a rolling deploy) gave it back without spending an attempt;
	// it waits to be claimed again, by a worker that can run it. Its last
	// error says why.
	ReasonGivenBack Reason = "given_back"
	// ReasonScheduled: the job was enqueued to run later.
	ReasonScheduled Reason = "scheduled"
	// ReasonRunning: the job is running.
	ReasonRunning Reason = "running"
	// ReasonFinished: the job completed, failed or was cancelled.
	ReasonFinished Reason = "finished"
)

// Explanation says why a job is not running, and when it should start.
// Its Lines are what `sluice explain` prints and the dashboard shows.
type Explanation struct {
	// JobID is the job's id.
	JobID int64 `json:"job_id"`
	// Kind is the job's kind.
	Kind string `json:"kind"`
	// Queue is the job's queue.
	Queue string `json:"queue"`
	// State is the job's state.
	State engine.State `json:"state"`
	// Reason is the main reason the job is not running.
	Reason Reason `json:"reason"`
	// Summary says the reason in a sentence.
	Summary string `json:"summary"`
	// QueuePaused is set when the job's queue is paused.
	QueuePaused bool `json:"queue_paused"`
	// Limits are the rate limits the job draws on; the one it waits on
	// has Binding set.
	Limits []LimitExplanation `json:"limits,omitempty"`
	// Concurrency is the job's concurrency key; nil without one.
	Concurrency *ConcurrencyExplanation `json:"concurrency,omitempty"`
	// CoalesceKey is the coalescing key the job holds while pending:
	// enqueues with the same key join it. Empty for none.
	CoalesceKey string `json:"coalesce_key,omitempty"`
	// Ahead counts the jobs whose turn comes before this one's in the
	// line it waits in: the ready jobs of its queue, the budget's parked
	// jobs or earlier slots, or the key's blocked jobs. Nil when it waits
	// in no line.
	Ahead *Count `json:"ahead,omitempty"`
	// RunAt is the job's run time (its slot, or the end of its backoff).
	RunAt time.Time `json:"run_at"`
	// Attempt is how many times the job ran (0 before its first run).
	Attempt int `json:"attempt"`
	// MaxAttempts is how many times it may run.
	MaxAttempts int `json:"max_attempts"`
	// LastError is its last run's error; empty for none.
	LastError string `json:"last_error,omitempty"`
	// Deferrals counts the times a rate limit deferred the job.
	Deferrals int `json:"deferrals"`
	// LastDeferral says why the last deferral happened; empty for none.
	LastDeferral string `json:"last_deferral,omitempty"`
	// EstimatedStart is when the job should start; zero when it cannot
	// be told (EstimateBasis then says why).
	EstimatedStart time.Time `json:"estimated_start,omitzero"`
	// EstimateBasis says what EstimatedStart was worked out from (Lines
	// prints "estimated start: …, from " and it), or, when EstimatedStart
	// is zero, why it cannot be told.
	EstimateBasis string `json:"estimate_basis"`
	// Now is the time the explanation was made at.
	Now time.Time `json:"now"`
}

// Count is a count that stops at a bound: N jobs, and Capped when there
// are at least N, maybe more (String prints "10000+" then). In JSON it is
// {"n": N, "capped": Capped}.
type Count = engine.Count

// LimitExplanation is one rate limit a job draws on.
type LimitExplanation struct {
	// Key is the budget's key.
	Key string `json:"key"`
	// Scope is the key's first part: a kind, a group, or "@queue".
	Scope string `json:"scope"`
	// Cost is what the job costs on the budget (1 unless declared).
	Cost int `json:"cost"`
	// To, Per and Burst are the limit in force: the declared one with an
	// override applied. Declared is false when the registry did not know
	// the kind (To and Per are then 0 and Interval and Burst are those
	// the budget was last charged under).
	To int `json:"to"`
	// Per is the limit's window.
	Per time.Duration `json:"per"`
	// Burst is how many a quiet budget admits at once.
	Burst int `json:"burst"`
	// Interval is the emission interval, Per / (To − Burst + 1).
	Interval time.Duration `json:"interval"`
	// Declared is false when the registry did not know the kind.
	Declared bool `json:"declared"`
	// Override is the target of the override in force ("" for none).
	Override string `json:"override,omitempty"`
	// Shadow is set when the limit only records its decisions.
	Shadow bool `json:"shadow"`
	// Paused is set when the limit is paused (To: 0).
	Paused bool `json:"paused"`
	// Binding is set for the limit the job waits on.
	Binding bool `json:"binding"`
	// Parked counts the jobs parked on the budget.
	Parked int `json:"parked"`
	// NextAdmission is when the budget next admits a cost-1 job; zero
	// when paused, or when it admits nothing again (held back past the
	// last time a budget holds).
	NextAdmission time.Time `json:"next_admission,omitzero"`
}

// String describes the limit as "10 per 1s, burst 2 (1 every 100ms)".
func (l LimitExplanation) String() string {
	var s string
	switch {
	case l.Paused:
		s = "paused (To: 0)"
	case l.Declared:
		s = fmt.Sprintf("%d per %s, burst %d (1 every %s)", l.To, l.Per, l.Burst, l.Interval)
	case l.Interval > 0:
		s = fmt.Sprintf("1 every %s, burst %d (as last charged)", l.Interval, l.Burst)
	default:
		s = "unknown (the kind is not registered here and the budget has no state)"
	}
	if l.Override != "" {
		s += ", overridden on " + l.Override
	}
	if l.Shadow {
		s += ", shadow mode (not enforced)"
	}
	return s
}

// ConcurrencyExplanation is a job's concurrency key.
type ConcurrencyExplanation struct {
	// Key is the job's concurrency key.
	Key string `json:"key"`
	// To is how many jobs of the key may hold a slot at once.
	To int `json:"to"`
	// Held is how many do.
	Held int `json:"held"`
	// Holders are (up to 20 of) the jobs holding a slot.
	Holders []int64 `json:"holders"`
	// HoldsSlot is set when this job holds one.
	HoldsSlot bool `json:"holds_slot"`
}

// Explain says why the job id is not running: its state, the limit(s)
// holding it with their keys and settings, its place in the line it waits
// in, and an estimated start computed from the budget's rate (or the
// queue's recent pace) and the jobs ahead of it. A job id that does not
// exist gives an error wrapping ErrNotFound ("job 12: not found").
func (c *Client) Explain(ctx context.Context, id int64) (*Explanation, error) {
	return Explain(ctx, c.pub, c.reg, id, c.clock.Now())
}

// Explain is Client.Explain for a store and registry at a given time: what
// the CLI calls. reg may be nil (the limits are then those the budgets
// were last charged under). Everything it says is read from one snapshot
// of the database (Store.ExplainFacts).
func Explain(ctx context.Context, pub *store.Store, reg *Registry, id int64, now time.Time) (*Explanation, error) {
	e, _, err := ExplainJob(ctx, pub, reg, id, now)
	return e, err
}

// ExplainJob is Explain that returns the job's row too, as read in the
// snapshot the explanation was made from: what the dashboard's job page
// shows beside it.
func ExplainJob(ctx context.Context, pub *store.Store, reg *Registry, id int64, now time.Time) (*Explanation, *engine.JobInfo, error) {
	s := engine.From(pub)
	if id < 1 {
		return nil, nil, fmt.Errorf("explain: %d is not a job id", id)
	}
	if reg == nil {
		reg = NewRegistry()
	}
	f, err := s.ExplainFacts(ctx, id, now, reg.limits())
	if err != nil {
		return nil, nil, err
	}
	view := &limitsView{reg: reg}
	view.setOverrides(f.Overrides)
	j := f.Job
	e := &Explanation{
		JobID: j.ID, Kind: j.Kind, Queue: j.Queue, State: j.State, QueuePaused: f.QueuePaused, CoalesceKey: f.CoalesceKey,
		RunAt: j.RunAt, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, LastError: j.LastError,
		Deferrals: f.Deferrals, LastDeferral: f.LastDeferral, Now: now,
	}
	var binding *engine.BudgetFacts
	var bindingLimit *LimitExplanation
	for i := range f.Budgets {
		b := &f.Budgets[i]
		l := explainLimit(view, j, b, now)
		e.Limits = append(e.Limits, l)
		if b.Waiting {
			binding, bindingLimit = b, &e.Limits[len(e.Limits)-1]
		}
	}
	if sf := f.Semaphore; sf != nil {
		// The key's limit is the one its row records, most recently
		// declared; a key without one (no row, or a row no enqueue
		// declared a limit on) takes the job's own To, as the engine does.
		ce := &ConcurrencyExplanation{Key: sf.Key, Holders: sf.Holders, HoldsSlot: j.HoldsSlot, Held: sf.Row.Held, To: sf.Row.Limit}
		if (!sf.Found || sf.Row.Limit <= 0) && j.Conc != nil {
			ce.To = j.Conc.To
		}
		e.Concurrency = ce
	}
	e.reason(f, binding, bindingLimit)
	return e, j, nil
}

// explainLimit describes one budget a job draws on with the limit in
// force on it.
func explainLimit(view *limitsView, j *engine.JobInfo, b *engine.BudgetFacts, now time.Time) LimitExplanation {
	spec, ok := view.reg.RateSpec(j.Kind, b.Key)
	if !ok {
		spec, ok = view.reg.scopeSpec(b.Key)
	}
	l := describeLimit(view, b.Key, spec, ok, b.Row, now)
	l.Cost, l.Binding = b.Cost, b.Waiting
	return l
}

// describeLimit describes a budget under spec (when known, with its
// override applied) or else under the limit it was last charged under.
func describeLimit(view *limitsView, key string, spec ratelimit.Spec, known bool, row engine.BudgetRow, now time.Time) LimitExplanation {
	l := LimitExplanation{Key: key, Scope: ratelimit.ScopeOf(key), Cost: 1, Parked: row.Parked}
	p := row.Params()
	if known {
		if o, has := view.override(key); has {
			spec, l.Override = o.Spec(spec), o.Target
		}
		l.To, l.Per, l.Burst, l.Shadow, l.Declared = spec.To, spec.Per, spec.Burst, spec.Shadow, true
		p = spec.Params
	} else {
		l.Burst = p.Burst
	}
	l.Interval, l.Paused = time.Duration(p.Interval), p.Paused
	if p.Interval > 0 && !p.Paused {
		info := engine.BudgetInfo{BudgetRow: row}
		info.IntervalNS, info.Burst = p.Interval, p.Burst
		l.NextAdmission = info.NextAdmission(now)
	}
	return l
}

// DescribeBudgets describes budgets with the limit in force on each: the
// one reg declares for the budget's scope (a kind, a group or a queue),
// with the stored override applied, or else the one the budget was last
// charged under. It is what the dashboard's budget pages show. reg may be
// nil.
func DescribeBudgets(ctx context.Context, s *engine.Store, reg *Registry, rows []engine.BudgetRow, now time.Time) ([]LimitExplanation, error) {
	if reg == nil {
		reg = NewRegistry()
	}
	view := &limitsView{reg: reg}
	if err := view.load(ctx, s); err != nil {
		return nil, fmt.Errorf("describe budgets: %w", err)
	}
	out := make([]LimitExplanation, len(rows))
	for i, r := range rows {
		spec, ok := reg.scopeSpec(r.Name)
		out[i] = describeLimit(view, r.Name, spec, ok, r, now)
	}
	return out, nil
}

// givenBack says whether a scheduled job waits because a worker that
// could not run it gave it back (giveBack): the last thing that set its
// last error was a give-back, and a claim of it spent no attempt. A
// failed attempt or an upstream's 429 since then replaces the error; and
// only a give-back stores givenBackText as is (a handler's error that
// quotes one is kept quoted: engine.LastErrorText).
func givenBack(j *engine.JobInfo) bool {
	return strings.Contains(j.LastError, givenBackText) && j.Claims > int64(j.Attempt)
}

// reason decides the main reason and the estimate.
func (e *Explanation) reason(f *engine.ExplainFacts, binding *engine.BudgetFacts, limit *LimitExplanation) {
	j := f.Job
	paused := ""
	if f.QueuePaused {
		paused = fmt.Sprintf("; queue %s is paused too, so it waits for a resume after that", j.Queue)
	}
	switch j.State {
	case engine.StateRunning:
		e.Reason = ReasonRunning
		e.Summary = fmt.Sprintf("running (attempt %d of %d), started %s", j.Attempt, j.MaxAttempts, stamp(j.AttemptedAt))
		e.EstimateBasis = "the start of its current attempt"
		e.EstimatedStart = j.AttemptedAt
	case engine.StateCompleted, engine.StateFailed, engine.StateCancelled:
		e.Reason = ReasonFinished
		e.Summary = fmt.Sprintf("%s %s after %d attempt(s); it will not run again unless retried", j.State, stamp(j.FinishedAt), j.Attempt)
		e.EstimateBasis = "it will not start again unless retried"
	case engine.StateParked:
		e.Reason = ReasonParked
		e.Ahead = aheadOf(binding)
		e.Summary = fmt.Sprintf("parked on rate limit %s (%s): %s parked job(s) of the budget get slots before it%s",
			j.WaitKey, limitText(limit), countText(e.Ahead), paused)
		e.estimateParked(binding, limit)
		if f.QueuePaused {
			e.EstimatedStart, e.EstimateBasis = time.Time{}, "not before the queue is resumed"
		}
	case engine.StateScheduled:
		switch {
		case j.WaitKey != "" && j.DeferredAt.IsZero():
			// Not deferred since it last ran: an upstream refused it (a
			// 429), which held its budgets back until its time, and gave
			// it no slot on them.
			e.Reason = ReasonRateLimited
			e.Summary = fmt.Sprintf("refused by the upstream (a 429, RetryAfter): it waits until %s, and rate limit %s (%s) admits nothing before then%s",
				stamp(j.RunAt), j.WaitKey, limitText(limit), paused)
			e.EstimatedStart = j.RunAt
			e.EstimateBasis = "the end of the upstream's wait (if the budget is spent when it comes back, it waits again)"
		case j.WaitKey != "":
			e.Reason = ReasonRateLimited
			e.Ahead = aheadOf(binding)
			e.Summary = fmt.Sprintf("deferred by rate limit %s (%s): it holds the slot at %s, after %s other slot(s) of the budget%s",
				j.WaitKey, limitText(limit), stamp(j.RunAt), countText(e.Ahead), paused)
			e.EstimatedStart = j.RunAt
			e.EstimateBasis = "its slot on the budget (a slot is a hint: if the budget is spent when it comes back, it waits again)"
		case f.QueuePaused && !j.RunAt.After(e.Now):
			// Due, and held by the pause alone: a job of a concurrency key
			// takes no slot while its queue is paused (it waits scheduled
			// and due); another is made ready, from which nothing is
			// claimed either.
			e.Reason = ReasonQueuePaused
			e.Summary = fmt.Sprintf("due since %s, but queue %s is paused: nothing is claimed from it until it is resumed", stamp(j.RunAt), j.Queue)
			if j.ConcKey != "" && !j.HoldsSlot {
				e.Summary = fmt.Sprintf("due since %s, but queue %s is paused: it takes a slot of concurrency key %s (or is blocked) within a tick of the resume, not before",
					stamp(j.RunAt), j.Queue, j.ConcKey)
			}
		case givenBack(j):
			e.Reason = ReasonGivenBack
			e.Summary = fmt.Sprintf("given back, without spending an attempt (%d of %d spent), by a worker that could not run it (its last error says why): "+
				"it is due %s, for a worker that can run it%s", j.Attempt, j.MaxAttempts, stamp(j.RunAt), paused)
			e.EstimatedStart, e.EstimateBasis = j.RunAt, "the end of its wait after the give-back (a worker that cannot run it gives it back again)"
		case j.Attempt > 0 || j.LastError != "":
			e.Reason = ReasonRetryBackoff
			e.Summary = fmt.Sprintf("waiting out a retry backoff after attempt %d of %d failed; it is due %s%s", j.Attempt, j.MaxAttempts, stamp(j.RunAt), paused)
			e.EstimatedStart, e.EstimateBasis = j.RunAt, "the end of its backoff"
		default:
			e.Reason = ReasonScheduled
			e.Summary = fmt.Sprintf("scheduled to run at %s%s", stamp(j.RunAt), paused)
			e.EstimatedStart, e.EstimateBasis = j.RunAt, "the time it was enqueued to run at"
		}
		if f.QueuePaused {
			e.EstimatedStart, e.EstimateBasis = time.Time{}, "not before the queue is resumed"
		}
	case engine.StateBlocked:
		e.Reason = ReasonBlocked
		e.Ahead = &f.Semaphore.Ahead
		c := e.Concurrency
		switch {
		case f.QueuePaused:
			e.Summary = fmt.Sprintf("blocked on concurrency key %s: %d of %d slot(s) held, %s blocked job(s) before it%s",
				c.Key, c.Held, c.To, countText(e.Ahead), paused)
			e.EstimateBasis = "not before the queue is resumed"
		case c.Held < c.To:
			// A slot free (or the key has no row): no job of the key
			// needs to finish; the dispatcher's tick hands it out.
			e.Summary = fmt.Sprintf("blocked on concurrency key %s: %d of %d slot(s) held, so one is free for the dispatcher to hand out; %s blocked job(s) before it",
				c.Key, c.Held, c.To, countText(e.Ahead))
			e.EstimateBasis = "a slot of its key is free: the dispatcher hands free slots to the key's blocked jobs, in their order, within a tick"
		default:
			e.Summary = fmt.Sprintf("blocked on concurrency key %s: %d of %d slot(s) held, %s blocked job(s) before it",
				c.Key, c.Held, c.To, countText(e.Ahead))
			e.EstimateBasis = "a slot is given back when a holder finishes, which cannot be told in advance"
		}
	case engine.StateReady:
		if f.QueuePaused {
			e.Reason = ReasonQueuePaused
			e.Summary = fmt.Sprintf("ready, but queue %s is paused: nothing is claimed from it until it is resumed", j.Queue)
			e.EstimateBasis = "not before the queue is resumed"
			return
		}
		e.Reason = ReasonReady
		e.Ahead = &f.ReadyAhead
		e.Summary = fmt.Sprintf("ready: waiting for a free worker, with %s job(s) of queue %s ahead of it", countText(e.Ahead), j.Queue)
		e.estimateReady(f)
	default:
		e.Summary = string(j.State)
	}
}

// times returns a·b for a, b ≥ 0, saturating at ratelimit.Never.
func times(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(max(a, 0)), uint64(max(b, 0)))
	if hi != 0 || lo > uint64(ratelimit.Never) {
		return ratelimit.Never
	}
	return int64(lo)
}

// estimateParked: a parked job gets its slot after the budget's cursor
// and one interval (times cost) for each parked job before it.
func (e *Explanation) estimateParked(b *engine.BudgetFacts, l *LimitExplanation) {
	switch {
	case b == nil || l == nil || l.Interval <= 0:
		e.EstimateBasis = "the budget's limit is not known here"
		return
	case l.Paused:
		e.EstimateBasis = "the limit is paused (To: 0): nothing is admitted until it is raised"
		return
	}
	now := engine.Nanos(e.Now)
	tol := int64(l.Burst-1) * int64(l.Interval)
	first := max(b.Row.NextSlot, now, b.Row.TAT-tol)
	at := ratelimit.Later(first, times(b.Ahead.N, times(int64(b.Cost), int64(l.Interval))))
	if at == ratelimit.Never {
		e.EstimateBasis = fmt.Sprintf("the budget admits nothing before the end of the times it holds (%s): a wait, or a clock, reaches past them",
			engine.MaxLimitedRunAt.Format(time.RFC3339))
		return
	}
	e.EstimatedStart = engine.FromNanos(at)
	e.EstimateBasis = fmt.Sprintf("the budget's next free slot plus one interval (%s) for each of the %s parked job(s) before it", l.Interval, countText(&b.Ahead))
	if b.Ahead.Capped {
		e.EstimateBasis += "; the count is capped, so it starts later than this"
	}
}

// estimateReady: a ready job starts after the jobs ahead of it, at the
// pace the queue completed or failed jobs in the last minute (cancelled
// ones are not counted: most never ran).
func (e *Explanation) estimateReady(f *engine.ExplainFacts) {
	switch {
	case f.ReadyAhead.N == 0:
		e.EstimatedStart, e.EstimateBasis = e.Now, "no job of its queue ahead of it: it starts as soon as a worker of the queue is free"
	case f.FinishedLastMinute == 0:
		e.EstimateBasis = "no job of the queue completed or failed in the last minute, so its pace is not known"
	default:
		per := time.Minute / time.Duration(f.FinishedLastMinute)
		e.EstimatedStart = e.Now.Add(time.Duration(f.ReadyAhead.N) * per)
		e.EstimateBasis = fmt.Sprintf("the jobs ahead of it at the queue's pace in the last minute (%d completed or failed)", f.FinishedLastMinute)
	}
}

func aheadOf(b *engine.BudgetFacts) *engine.Count {
	if b == nil {
		return nil
	}
	return &b.Ahead
}

func limitText(l *LimitExplanation) string {
	if l == nil {
		return "limit unknown"
	}
	return l.String()
}

func countText(c *engine.Count) string {
	if c == nil {
		return "0"
	}
	return c.String()
}

func stamp(t time.Time) string { return human.Stamp(t) }

// Lines is the explanation for a person, one fact per line: what `sluice
// explain` prints and the dashboard's job page shows.
func (e *Explanation) Lines() []string {
	out := []string{fmt.Sprintf("job %d (%s, queue %s) is %s", e.JobID, e.Kind, e.Queue, e.Summary)}
	for _, l := range e.Limits {
		role := "draws on"
		if l.Binding {
			role = "waits on"
		}
		line := fmt.Sprintf("rate limit: %s %s (cost %d): %s", role, l.Key, l.Cost, l)
		if l.Parked > 0 {
			line += fmt.Sprintf("; %d job(s) parked on it", l.Parked)
		}
		if !l.NextAdmission.IsZero() {
			line += "; next admission " + stamp(l.NextAdmission)
		}
		out = append(out, line)
	}
	if c := e.Concurrency; c != nil {
		line := fmt.Sprintf("concurrency: key %s, %d of %d slot(s) held", c.Key, c.Held, c.To)
		if len(c.Holders) > 0 {
			line += fmt.Sprintf(" by job(s) %v", c.Holders)
		}
		if c.HoldsSlot {
			line += "; this job holds one"
		}
		out = append(out, line)
	}
	if e.CoalesceKey != "" {
		out = append(out, "coalescing: it holds key "+e.CoalesceKey+"; enqueues with that key join it")
	}
	if e.QueuePaused && e.Reason != ReasonQueuePaused {
		out = append(out, "queue: "+e.Queue+" is paused")
	}
	line := fmt.Sprintf("deferred: %d time(s)", e.Deferrals)
	if e.LastDeferral != "" {
		line += ", last: " + e.LastDeferral
	}
	out = append(out, line)
	if e.Attempt > 0 || e.LastError != "" {
		line := fmt.Sprintf("attempts: %d of %d", e.Attempt, e.MaxAttempts)
		if e.LastError != "" {
			line += "; last error: " + firstLine(e.LastError)
		}
		out = append(out, line)
	}
	if e.EstimatedStart.IsZero() {
		out = append(out, "estimated start: unknown: "+e.EstimateBasis)
	} else {
		out = append(out, fmt.Sprintf("estimated start: %s (%s), from %s", stamp(e.EstimatedStart), human.In(e.EstimatedStart, e.Now), e.EstimateBasis))
	}
	return out
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i] + " …"
		}
	}
	return s
}
