package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// DefaultHorizon is how far ahead a budget hands out slots to deferred
// jobs; jobs beyond it are parked until the horizon reaches them.
const DefaultHorizon = 5 * time.Minute

// horizonOr returns h, or DefaultHorizon when h is not positive.
func horizonOr(h time.Duration) time.Duration {
	if h <= 0 {
		return DefaultHorizon
	}
	return h
}

// Limits tells a claim which rate limits apply to a job. The worker's
// registry implements it.
type Limits interface {
	// RateSpec returns the limit that the job's kind declares for the
	// budget key's scope, or false when it declares none (for example,
	// the job was enqueued under a limit that has since been removed).
	RateSpec(kind, budgetKey string) (ratelimit.Spec, bool)
	// QueueLimits returns the limits on a queue, which cover every job
	// claimed from it whatever its kind; none for most queues.
	QueueLimits(queue string) []QueueLimit
}

// QueueLimit is a limit on a whole queue and the budget it draws on.
type QueueLimit struct {
	Key  string
	Spec ratelimit.Spec
}

// QueueScope is the scope of queue limits' budget keys: a queue's budget
// is "@queue/NAME".
const QueueScope = "@queue"

// ClaimParams says what a claim takes and how it decides.
type ClaimParams struct {
	// ProcessID is the claiming worker's registered id.
	ProcessID int64
	// Queues are tried in order until enough candidates are locked.
	Queues []string
	// Max is how many jobs to claim at most: the worker's free slots.
	Max int
	// Candidates is how many ready jobs that carry a rate-limit key a claim
	// with Limits locks and decides, beside up to Max that carry none.
	// Defaults to Max; negative takes none (PromoteDue's jobs still come). Candidates past the first Max admitted are left
	// ready, unless their limit defers them. A worker narrows it while its
	// claims defer more than they admit, so that a flood on a tight budget
	// costs each claim little while it is parked out of the way
	// (DeferOverflow).
	Candidates int
	// Clock stamps the claim and decides rate limits. With DatabaseTime the
	// decision reads the database's clock once, after the budget rows are
	// locked, so skew between worker hosts cannot let claims through
	// closer than the limit allows (SQLite has no clock of its own; the
	// host's is read there).
	Clock Clock
	// Limits applies rate limits; nil claims exactly as a plain queue.
	Limits Limits
	// Fair adds each queue's fair jobs as a stream of their own, taken by
	// virtual start (docs/fairness.md); a worker sets it when its registry
	// has a kind with a fairness key. Without it a claim runs only the
	// plain (and rate-limited) statements, and takes no fair job.
	Fair bool
	// Horizon is how far ahead slots are handed out. Defaults to
	// DefaultHorizon.
	Horizon time.Duration
	// PromoteDue, with Limits, makes the claim first take the due jobs of
	// its queues that wait on a rate limit (deferred ones whose slot has
	// come, and ones an upstream 429 held back) and check them with the
	// rest, so a backlog drains at its limit's pace and not at the
	// dispatcher's. A worker sets it when a slot it knows of has come, and
	// when it polls.
	PromoteDue bool
	// DueLead, with PromoteDue, also takes the waiting jobs due within it,
	// and a job among them that its budget admits within DueLead is
	// admitted at that time: the claim decides as of it (ClaimResult.Ahead),
	// on the database's clock, and the jobs it admits under a limit are
	// held until then (Job.Hold). A worker that wakes DueLead before a slot
	// thus admits the job at its slot instead of a wake-up and a round
	// trip later, which a limit with no burst to spare would lose. 0 takes
	// only due jobs.
	DueLead time.Duration
	// BudgetHint, sorted, are the budgets the claim expects to need — a
	// worker passes those its last claim locked (ClaimResult.Budgets). They
	// are locked in the round trip that locks the candidates, saving one,
	// unless the claim takes no rate-limited candidate (Candidates < 0 and
	// no due job). Where claims lock rows, only the budgets no other claim
	// holds are locked, without waiting (yield.go). A claim that needs
	// a budget the hint did not lock, sorting before one it did, never
	// waits for it: it takes it when no one holds it, and otherwise starts
	// again without the hint, so no claim waits for a budget out of the
	// one global order budgets are locked in.
	BudgetHint []string
	// SnapshotHint, with BudgetHint, reads the hinted budgets without
	// locking them and, when they admit every candidate the claim takes,
	// marks those jobs running before it locks the budgets, so that other
	// claims wait for these budgets only while it decides, writes them and
	// commits (snapshot.go). Where a transaction holds the only write lock
	// (SQLite) it changes nothing. A worker sets it while its claims defer
	// nothing: on budgets that defer, the snapshot costs a round trip.
	SnapshotHint bool
	// Swept are the queues in which a sweep of this process is moving a
	// flood out of the way (DeferOverflow): of a queue whose span is nil
	// the claim takes no rate-limited job, and of the others only those
	// more urgent than the span or queued after it, and none like the
	// flood's (sweeps.go), so that it neither meets the flood nor holds
	// back the limited jobs queued after it.
	Swept map[string]*Span

	// slotHint are semaphores the claim locks before its budgets: those an
	// earlier run of it could not lock without waiting when it gave the
	// slots of the jobs it deferred back (heldSemaphores). waitSlots,
	// after maxSlotRetries such runs, gives them back waiting instead, as
	// every claim did before: should a run after those defer a slot
	// holder of yet another key held elsewhere, that wait is out of order,
	// and the database may break a deadlock.
	slotHint  []string
	waitSlots bool
}

// maxSlotRetries bounds how many times a claim runs again to lock, before
// its budgets, the semaphores another transaction held when it gave slots
// back.
const maxSlotRetries = 3

// Span is a run of a queue's ready rate-limited jobs in claim order, from
// its first job to its last, both included: those of a flood (Kind and
// RateKeys, as stored) that a sweep is moving. Jobs like the flood's that
// come before or after it (jobs of the flood that came back for their
// slots) are left to the sweep too: a claim that deferred them would move
// the budget's slot cursor under it.
type Span struct {
	First, Last    Place
	Kind, RateKeys string
}

// holds says whether j is one of the jobs a span leaves to its sweep.
func (sp *Span) holds(j *Job) bool {
	return j.Kind == sp.Kind && EncodeRateKeys(j.RateKeys) == sp.RateKeys
}

// Place is where a ready job stands in its queue's claim order.
type Place struct {
	Priority int
	ID       int64
}

// ClaimResult is what a claim took and what it deferred.
type ClaimResult struct {
	// Jobs are claimed: running, for this process.
	Jobs []*Job
	// Deferred jobs were over a rate limit and wait again.
	Deferred []Deferral
	// Displaced jobs gave their slots to more urgent deferred jobs and
	// wait again, at their budget's next free slot (Until) or parked.
	Displaced []Deferral
	// Shadowed jobs were over a limit in shadow mode: they run, and this
	// records that an enforcing limit would have deferred them.
	Shadowed []Deferral
	// Unfit jobs failed: one of their limits can never admit their cost.
	Unfit []Unfit
	// Promoted counts the due waiting jobs the claim took (PromoteDue).
	Promoted int
	// Budgets are the budgets the claim locked, sorted: the next claim's
	// BudgetHint.
	Budgets []string
	// MoreLimited is set when the claim took as many rate-limited
	// candidates as it was allowed (Candidates): more may be ready.
	MoreLimited bool
	// FairCandidates counts the ready fair jobs the claim locked as
	// candidates (with Fair): a worker whose kinds declare no fairness key
	// claims with Fair while it finds such jobs, which a kind's removed
	// Fair left.
	FairCandidates int
	// Overflows are the budgets this claim deferred jobs on while more
	// limited jobs were ready (or that it parked jobs on), with what
	// identifies the jobs like them: DeferOverflow defers those in bulk,
	// out of the claims' way.
	Overflows []Overflow
	// DueAt is the time PromoteDue took due jobs at, on the claim's clock:
	// every waiting job due by then was taken (zero without PromoteDue),
	// but those that needed a slot of a key whose semaphore another
	// transaction held, which are left due: the dispatcher promotes them
	// once it is free (Store.Promote).
	DueAt time.Time
	// Unparked are the slots the claim handed to parked jobs of the
	// budgets it locked, when those budgets' slots came within the
	// horizon: like a deferral's, each is a time to claim again at.
	Unparked []time.Time
	// DecidedAt is the time rate limits were decided as of, and the claim
	// time of its jobs: the clock read after the budget locks, plus Ahead;
	// zero when no candidate carried a limit.
	DecidedAt time.Time
	// Ahead is how far past the clock the claim decided its rate limits:
	// a job came for its slot a moment early (DueLead), and the claim
	// admitted it as of the slot. The jobs admitted under a limit must not
	// start before DecidedAt (Job.Hold). Zero when no job came early.
	Ahead time.Duration
	// Contended is set when the claim decided on a snapshot of its budgets
	// (SnapshotHint) and another claim wrote one of them between the
	// snapshot and the lock: claims are taking turns on these budgets,
	// which is when deciding on a snapshot shortens the turns.
	Contended bool
	// Yielded counts the rate-limited candidates the claim left ready,
	// undecided, because another claim held their budget while this one
	// had unlimited jobs to take (yield.go): the claim after it decides
	// them.
	Yielded int
	// woke are queues whose blocked jobs took the slots deferred jobs gave
	// back.
	woke []string
	// hinted are the budgets locked from BudgetHint, and hintedAt the
	// database's clock read after them (zero on the caller's clock).
	hinted   map[string]*budget
	hintedAt time.Time
	// snapshot is set when hinted was read without locks (snapshot.go),
	// and marked when the claim's jobs were marked running with the
	// budgets' lock.
	snapshot, marked bool
}

// Deferral records one job a rate limit held back.
type Deferral struct {
	JobID int64
	Kind  string
	// Key is the budget that held the job: of several, the one whose next
	// admission is latest.
	Key string
	// Until is the slot the job comes back at; zero when it is parked.
	Until time.Time
	// Parked is set when the budget's slots reach past the horizon.
	Parked bool
}

// Claim takes up to p.Max ready jobs in one transaction: it locks
// candidates queue by queue (by priority, then id), checks those that
// carry a rate-limit key against their budgets, claims the admitted ones
// and defers the rest. With no limits it runs only the plain statements.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (*ClaimResult, error) {
	if p.Max <= 0 {
		return &ClaimResult{}, nil
	}
	var res *ClaimResult
	claim := func() error {
		return s.inTx(ctx, func(tx Tx) error {
			res = &ClaimResult{}
			return s.claim(ctx, tx, p, res)
		})
	}
	err := claim()
	for heldRuns := 0; err != nil; {
		var held heldSemaphores
		if errors.Is(err, errHintMissed) && p.BudgetHint != nil {
			p.BudgetHint = nil
		} else if errors.As(err, &held) && !p.waitSlots {
			heldRuns++
			p.slotHint = sortedKeys(append(slices.Clone(p.slotHint), held...))
			p.waitSlots = heldRuns == maxSlotRetries
		} else {
			break
		}
		err = claim()
	}
	if err != nil {
		return nil, s.wrap(fmt.Errorf("claim: %w", err))
	}
	s.Wake(res.woke...)
	return res, nil
}

// errHintMissed restarts a claim whose BudgetHint missed a budget that
// sorts before one it locked, when another transaction holds that budget
// (or its row does not exist yet), and one whose decision on a snapshot of
// its budgets did not hold once they were locked (snapshot.go).
var errHintMissed = errors.New("the budget hint missed a budget")

func (s *Store) claim(ctx context.Context, tx Tx, p ClaimParams, res *ClaimResult) error {
	window := p.Max
	if p.Limits != nil {
		window = p.Max
		switch {
		case p.Candidates > 0:
			window = p.Candidates
		case p.Candidates < 0:
			window = 0
		}
	}
	var due []*Job
	switch {
	case p.Limits != nil && p.PromoteDue:
		// Its promotion locks the semaphores of slotHint too.
		var err error
		if due, err = s.promoteDue(ctx, tx, p, max(window, p.Max), res); err != nil {
			return err
		}
	case len(p.slotHint) > 0:
		if _, err := s.lockSlots(ctx, tx, p.slotHint, At(p.Clock.Host())); err != nil {
			return err
		}
	}
	cands, err := s.candidates(ctx, tx, p, window, due, res)
	if err != nil {
		return err
	}
	if len(cands) == 0 {
		return nil
	}
	if p.Limits == nil && len(cands) > p.Max {
		// The plain and fair streams each brought up to Max.
		cands = cands[:p.Max]
	}
	admitted := cands
	var writes []Stmt
	var gives holders
	if p.Limits != nil {
		var err error
		if admitted, writes, gives, err = s.applyLimits(ctx, tx, p, cands, res); err != nil {
			return err
		}
	}
	now := res.DecidedAt
	if now.IsZero() {
		now = p.Clock.Host()
	}
	if len(gives) > 0 {
		lock := func(keys []string) (*slots, error) { return s.lockFreeSlots(ctx, tx, keys, now) }
		if p.waitSlots {
			lock = func(keys []string) (*slots, error) { return s.lockSlots(ctx, tx, keys, At(now)) }
		}
		stmts, queues, err := s.giveBackWith(ctx, gives, lock)
		if err != nil {
			return err
		}
		writes = append(writes, stmts...)
		res.woke = queues
	}
	if len(admitted) > 0 {
		ids := make([]int64, len(admitted))
		for i, j := range admitted {
			ids[i] = j.ID
			j.Attempt++
			j.Claims++
			j.ClaimedAt = now
		}
		if !res.marked {
			writes = append(writes, stmt(s.q.MarkRunning(ids, p.ProcessID, Micros(now))))
		}
	}
	if !anyCalls(admitted) {
		// Nothing more to read: the writes and the commit go in one
		// round trip where the database can.
		if err := pipelineCommit(ctx, tx, writes, nil); err != nil {
			return fmt.Errorf("claim and defer: %w", err)
		}
		res.Jobs = admitted
		return nil
	}
	if err := pipeline(ctx, tx, writes, nil); err != nil {
		return fmt.Errorf("claim and defer: %w", err)
	}
	if err := s.loadCalls(ctx, tx, admitted); err != nil {
		return err
	}
	res.Jobs = admitted
	return nil
}

// candidates locks a claim's candidates queue by queue: up to p.Max of the
// ready jobs that carry no rate-limit key and, with Limits, up to window of
// those that do, in priority and id order. The two are separate streams,
// each through its own index, so a flood of limited jobs at the head of a
// queue is never walked over on the way to the jobs behind it. Without
// Limits a claim takes only jobs that carry no key: a worker that knows no
// limit never runs a limited job unchecked.
func (s *Store) candidates(ctx context.Context, tx Tx, p ClaimParams, window int, due []*Job, res *ClaimResult) ([]*Job, error) {
	var plain, limited, fair []*Job
	// Fair jobs a rate limit defers are no one's turn: with Limits the fair
	// stream brings window more, to claim in their place.
	fairMax := p.Max
	if p.Limits != nil {
		fairMax += window
	}
	for qi, q := range p.Queues {
		// Both streams of a queue in one round trip where the database can.
		var stmts []Stmt
		var into []*[]*Job
		lead := 0 // statements before the streams, which return no rows
		if g := s.q.GenericPlans(); qi == 0 && p.Swept != nil && g != "" {
			// Around a sweep each queue takes up to three statements more,
			// which the database would plan again at every claim.
			stmts, lead = append(stmts, stmt(g, nil)), 1
		}
		if n := p.Max - len(plain); n > 0 {
			stmts, into = append(stmts, query(s.q.LockReady(q, false, n))), append(into, &plain)
		}
		if n := window - len(limited); p.Limits != nil && n > 0 {
			span, swept := p.Swept[q]
			switch {
			case !swept:
				stmts, into = append(stmts, query(s.q.LockReady(q, true, n))), append(into, &limited)
			case span != nil:
				for _, st := range s.aroundSpan(q, *span, n) {
					stmts, into = append(stmts, st), append(into, &limited)
				}
			}
		}
		if n := fairMax - len(fair); p.Fair && n > 0 {
			stmts, into = append(stmts, query(s.q.LockReadyFair(q, p.Limits != nil, n))), append(into, &fair)
		}
		// The hinted budgets, and then the clock, ride along with the
		// first queue's candidates: not in a claim that takes no limited
		// job, whose unlimited ones would wait for them in vain while a
		// sweep or another claim holds them, nor beside a sweep, where
		// the hint is most likely the flood's budget. (Locking it there
		// measured the same within noise: docs/benchmarks.md.)
		hinted := len(p.BudgetHint) > 0 && p.Limits != nil && res.hinted == nil && (window > 0 || len(due) > 0) && p.Swept == nil
		if hinted {
			res.hinted = map[string]*budget{}
			read := s.q.LockBudgets
			switch res.snapshot = s.snapshotEligible(p); {
			case res.snapshot:
				read = s.q.ReadBudgets
			case s.d.Capabilities().RowLocks:
				// Waiting for them here would hold back the unlimited
				// candidates read in this round trip (yield.go); a
				// claim that has none completes its hint as one that
				// missed budgets.
				read = s.q.LockFreeBudgets
			}
			stmts = append(stmts, query(read(p.BudgetHint)))
			if s.readsDatabase(p.Clock) {
				stmts = append(stmts, query(s.d.Now(), nil))
			}
		}
		err := pipeline(ctx, tx, stmts, func(i int, rows Rows) error {
			i -= lead
			for rows.Next() {
				switch {
				case i < len(into):
					j, err := scanJob(rows)
					if err != nil {
						return err
					}
					*into[i] = append(*into[i], j)
				case i == len(into):
					if err := loadBudget(rows, res.hinted); err != nil {
						return err
					}
				default:
					var us int64
					if err := rows.Scan(&us); err != nil {
						return err
					}
					res.hintedAt = FromMicros(us)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if span := p.Swept[q]; span != nil {
			// Around a span, its streams came in claim order and may bring
			// more than the window, and jobs like the flood's.
			limited = slices.DeleteFunc(limited, func(j *Job) bool { return j.Queue == q && span.holds(j) })
		}
		limited = limited[:min(len(limited), window)]
		if len(plain) >= p.Max && (p.Limits == nil || len(limited) >= window) && (!p.Fair || len(fair) >= fairMax) {
			break
		}
	}
	res.MoreLimited = p.Limits != nil && window > 0 && len(limited) >= window
	res.FairCandidates = len(fair)
	if len(limited) == 0 && len(due) == 0 && len(fair) == 0 {
		return plain, nil
	}
	// Merge in queue order: the queues as given, then priority, then id.
	rank := make(map[string]int, len(p.Queues))
	for i, q := range p.Queues {
		rank[q] = i
	}
	order := func(a, b *Job) int {
		return cmp.Or(cmp.Compare(rank[a.Queue], rank[b.Queue]), cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	}
	out := append(append(plain, limited...), due...)
	slices.SortStableFunc(out, order)
	if len(fair) == 0 {
		// A due job the claim made ready may also have come through a stream.
		return slices.CompactFunc(out, func(a, b *Job) bool { return a.ID == b.ID }), nil
	}
	out = mergeFair(out, fair, order)
	seen := make(map[int64]bool, len(out))
	return slices.DeleteFunc(out, func(j *Job) bool {
		dup := seen[j.ID]
		seen[j.ID] = true
		return dup
	}), nil
}

// mergeFair merges the fair stream, in its own order (queue, priority,
// virtual start), into the other candidates, sorted by order: the head of
// the fair stream goes first when order puts it before the other head.
func mergeFair(others, fair []*Job, order func(a, b *Job) int) []*Job {
	out := make([]*Job, 0, len(others)+len(fair))
	for len(others) > 0 && len(fair) > 0 {
		if order(fair[0], others[0]) < 0 {
			out, fair = append(out, fair[0]), fair[1:]
		} else {
			out, others = append(out, others[0]), others[1:]
		}
	}
	return append(append(out, others...), fair...)
}

// promoteDue makes the due jobs of p's queues that wait on a rate limit
// ready, taking concurrency slots for those that need one, so that the
// claim's candidates include them. It wakes no other worker: this claim
// takes them. One that needs a slot of a key whose semaphore another
// transaction holds is left due, waiting for no one (lockDueSlots), so
// that the claim's other jobs do not wait for that transaction either,
// and the jobs due after it are taken in its place (dueRounds).
func (s *Store) promoteDue(ctx context.Context, tx Tx, p ClaimParams, limit int, res *ClaimResult) ([]*Job, error) {
	at, err := s.now(ctx, tx, p.Clock)
	if err != nil {
		return nil, err
	}
	by := at.Add(max(p.DueLead, 0))
	res.DueAt = by
	// The ones made ready are this claim's candidates, whatever else the
	// claim looks at.
	var ready []*Job
	also := p.slotHint
	var held []string
	for round := 1; ; round++ {
		q, args := s.q.LockDueWaiting(p.Queues, Micros(by), limit)
		if len(held) > 0 {
			q, args = s.q.LockDueWaitingBeyond(p.Queues, Micros(by), held, limit)
		}
		jobs, due, err := scanDueWaiting(ctx, tx, q, args)
		if err != nil {
			return nil, fmt.Errorf("lock due waiting jobs: %w", err)
		}
		pr, err := s.promote(ctx, tx, due, Micros(at), false, also)
		if err != nil {
			return nil, fmt.Errorf("promote due waiting jobs: %w", err)
		}
		also = nil // locked by the first round, for the claim
		res.Promoted += len(due) - len(pr.left)
		for _, j := range jobs {
			if slices.Contains(pr.ready, j.ID) {
				j.HoldsSlot = j.HoldsSlot || slices.Contains(pr.slotted, j.ID)
				ready = append(ready, j)
			}
		}
		if len(pr.left) == 0 || len(due) < limit || round == dueRounds {
			return ready, nil
		}
		limit = len(pr.left)
		held = appendNew(held, leftKeys(due, pr.left)...)
	}
}

// scanDueWaiting reads the rows of LockDueWaiting (or
// LockDueWaitingBeyond): the jobs, and what promoting them needs.
func scanDueWaiting(ctx context.Context, tx Tx, q string, args []any) ([]*Job, []DueRow, error) {
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var jobs []*Job
	var due []DueRow
	for rows.Next() {
		var limit int
		var duration int64
		var discard bool
		var attempted nullInt64
		j, err := scanJob(rows, &limit, &duration, &discard, &attempted)
		if err != nil {
			return nil, nil, err
		}
		d := DueRow{ID: j.ID, Queue: j.Queue, HoldsSlot: j.HoldsSlot, CameBack: attempted.Valid || j.Deferrals > 0}
		if j.ConcKey != "" {
			d.Conc = &Conc{Key: j.ConcKey, To: limit, Duration: time.Duration(duration) * time.Microsecond, Discard: discard}
		}
		jobs, due = append(jobs, j), append(due, d)
	}
	return jobs, due, rows.Err()
}

func scanJob(rows Rows, extra ...any) (*Job, error) {
	var j Job
	var args, rateKeys, concKey, waitKey, metadata, reason nullString
	var created, runAt int64
	var deferredAt nullInt64
	dest := append([]any{&j.ID, &j.Kind, &j.Queue, &j.Priority, &args, &j.Attempt, &j.MaxAttempts, &created, &runAt, &rateKeys,
		&concKey, &j.HoldsSlot, &j.Calls, &waitKey, &metadata, &j.Deferrals, &reason, &deferredAt, &j.Claims}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	j.ConcKey, j.WaitKey = concKey.String, waitKey.String
	j.Metadata, j.DeferralReason = metadata.String, reason.String
	if deferredAt.Valid {
		j.DeferredAt = FromMicros(deferredAt.Int64)
	}
	j.Args = []byte(args.String)
	j.CreatedAt = FromMicros(created)
	j.RunAt = FromMicros(runAt)
	j.RateKeys = DecodeRateKeys(rateKeys.String)
	return &j, nil
}
