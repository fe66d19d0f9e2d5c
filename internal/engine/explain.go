package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// MaxAhead bounds the counts of jobs ahead of one in ExplainFacts: a
// count that reaches it is reported as capped ("10000+").
const MaxAhead = 10000

// maxHolders bounds the slot holders ExplainFacts lists.
const maxHolders = 20

// ExplainFacts is what the database says about why one job is where it
// is: the facts jobs.Client.Explain reasons from. Every count is read
// through an index and bounded by MaxAhead.
type ExplainFacts struct {
	Job *JobInfo
	// Now is when the facts were read (the caller's clock).
	Now time.Time
	// QueuePaused is set when the job's queue is paused.
	QueuePaused bool
	// CoalesceKey is the coalescing key the job holds while pending;
	// empty for none.
	CoalesceKey string
	// Budgets has one entry per rate-limit budget the job draws on, in
	// the job's order, and one for the budget it waits on when that is
	// not among them (a queue's limit).
	Budgets []BudgetFacts
	// ReadyAhead counts the ready jobs of the queue claimed before this
	// one; set for a ready job only.
	ReadyAhead Count
	// Semaphore is the job's concurrency key; nil without one.
	Semaphore *SemaphoreFacts
	// Deferrals counts the times a rate limit deferred the job, and
	// LastDeferral says why the last time.
	Deferrals    int
	LastDeferral string
	// FinishedLastMinute counts the jobs of the queue that completed or
	// failed in the minute before Now: the queue's recent pace. Cancelled
	// jobs are left out: most never ran (an operator's bulk cancel would
	// make the pace look fast), and one a handler cancelled is not told
	// apart from them. With jobs deleted on completion only the failed
	// ones are counted.
	FinishedLastMinute int64
	// Overrides are the limit overrides stored, read with the budgets
	// (none are read for a job that draws on no budget).
	Overrides []Override
}

// BudgetFacts is one budget a job draws on.
type BudgetFacts struct {
	Key  string
	Cost int
	// Row is the budget's state; Found is false for a budget without a
	// row (idle or never used: it admits a burst at once).
	Row   BudgetRow
	Found bool
	// Waiting is set for the budget the job waits on.
	Waiting bool
	// Ahead counts, for the budget the job waits on, the jobs whose turn
	// comes first: parked jobs before it when it is parked, scheduled
	// jobs with earlier slots when it holds a slot.
	Ahead Count
}

// SemaphoreFacts is a job's concurrency key.
type SemaphoreFacts struct {
	Key string
	// Row is the semaphore; Found is false while the key has no row.
	Row   SemaphoreRow
	Found bool
	// Holders are (up to 20 of) the jobs holding a slot, by id.
	Holders []int64
	// Ahead counts the blocked jobs before this one; set when it is
	// blocked.
	Ahead Count
}

// ExplainFacts reads why the job id is where it is: the budgets it draws
// on are those of its rate keys and, with lim, of its queue's limits
// (lim may be nil: then only a queue limit it waits on). Every fact, the
// limit overrides too, is read in one read-only transaction, from one
// snapshot of the database (DB.BeginRead): a job whose finish hands its
// slot on while it is explained is described as it was before or as it
// is after, never half of each. The reads take no lock and wait for none.
// It returns ErrNotFound for an id that does not exist.
func (s *Store) ExplainFacts(ctx context.Context, id int64, now time.Time, lim Limits) (*ExplainFacts, error) {
	d, err := s.dash()
	if err != nil {
		return nil, err
	}
	var f *ExplainFacts
	err = s.readSnapshot(ctx, fmt.Sprintf("explain job %d", id), func(ex Executor) error {
		var err error
		f, err = s.explainFacts(ctx, ex, d, id, now, lim)
		return err
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// readSnapshot runs fn in a read-only transaction whose statements all
// read one snapshot (DB.BeginRead); what names the read in the error of
// a failed begin. Nothing in fn may use the pool itself: on SQLite the
// transaction holds the store's one connection.
func (s *Store) readSnapshot(ctx context.Context, what string, fn func(ex Executor) error) error {
	begin := func(ctx context.Context) (Tx, error) {
		tx, err := s.db.BeginRead(ctx)
		if err != nil {
			return nil, s.wrap(fmt.Errorf("%s: begin a read-only transaction: %w", what, err))
		}
		return tx, nil
	}
	return s.inTxOn(ctx, begin, func(tx Tx) error { return fn(tx) })
}

// explainFacts is ExplainFacts through ex.
func (s *Store) explainFacts(ctx context.Context, ex Executor, d DashboardDialect, id int64, now time.Time, lim Limits) (*ExplainFacts, error) {
	j, err := s.getJob(ctx, ex, id)
	if err != nil {
		return nil, err // "job N: not found"; saying it is an explain is the caller's part (the CLI prefixes "explain: ")
	}
	f := &ExplainFacts{Job: j, Now: now, Deferrals: j.Deferrals, LastDeferral: j.DeferralReason}
	wrap := func(what string, err error) error { return s.wrap(fmt.Errorf("explain job %d: %s: %w", id, what, err)) }
	count := func(what, q string, args []any) (Count, error) {
		c, err := s.boundedCount(ctx, ex, what, q, args, MaxAhead)
		if err != nil {
			return Count{}, wrap(what, err)
		}
		return c, nil
	}

	q, args := d.QueuePaused(j.Queue)
	if f.QueuePaused, err = queryBool(ctx, ex, q, args); err != nil {
		return nil, wrap("queue paused", err)
	}
	q, args = d.CoalesceKey(id)
	if f.CoalesceKey, err = queryString(ctx, ex, q, args); err != nil {
		return nil, wrap("coalesce key", err)
	}
	keys := j.RateKeys
	if j.WaitKey != "" && !slices.ContainsFunc(keys, func(k RateKey) bool { return k.Key == j.WaitKey }) {
		// a queue's limit, or an upstream 429 pushed on a budget
		keys = append(slices.Clip(keys), RateKey{Key: j.WaitKey, Cost: 1})
	}
	if lim != nil {
		for _, ql := range lim.QueueLimits(j.Queue) {
			if !slices.ContainsFunc(keys, func(k RateKey) bool { return k.Key == ql.Key }) {
				keys = append(slices.Clip(keys), RateKey{Key: ql.Key, Cost: 1})
			}
		}
	}
	for _, rk := range keys {
		bf := BudgetFacts{Key: rk.Key, Cost: rk.Cost, Waiting: rk.Key == j.WaitKey}
		if bf.Row, bf.Found, err = s.budgetInfo(ctx, ex, rk.Key); err != nil {
			return nil, err // "budget K: …"
		}
		switch {
		case bf.Waiting && j.State == StateParked:
			q, args := d.ParkedAhead(rk.Key, j.Queue, j.Priority, id, MaxAhead+1)
			bf.Ahead, err = count("parked ahead", q, args)
		case bf.Waiting && j.State == StateScheduled:
			q, args := d.SlotsAhead(rk.Key, Micros(j.RunAt), id, MaxAhead+1)
			bf.Ahead, err = count("slots ahead", q, args)
		}
		if err != nil {
			return nil, err
		}
		f.Budgets = append(f.Budgets, bf)
	}
	if len(keys) > 0 {
		if f.Overrides, err = s.ListOverridesIn(ctx, ex); err != nil {
			return nil, err // "list limit overrides: …"
		}
	}
	if j.State == StateReady {
		q, args := d.ReadyAhead(j.Queue, j.Priority, id, MaxAhead+1)
		if f.ReadyAhead, err = count("ready ahead", q, args); err != nil {
			return nil, err
		}
	}
	if j.ConcKey != "" {
		if f.Semaphore, err = s.semaphoreFacts(ctx, ex, d, j); err != nil {
			return nil, wrap("concurrency key", err)
		}
	}
	fin, err := s.finishedSince(ctx, ex, d, now.Add(-time.Minute), time.Minute)
	if err != nil {
		return nil, err // "finished since: …"
	}
	for _, x := range fin {
		if x.Queue == j.Queue && x.State != StateCancelled {
			f.FinishedLastMinute += x.Count
		}
	}
	return f, nil
}

// semaphoreFacts reads a job's concurrency key through ex: its semaphore,
// holders, and the blocked jobs before the job.
func (s *Store) semaphoreFacts(ctx context.Context, ex Executor, d DashboardDialect, j *JobInfo) (*SemaphoreFacts, error) {
	sf := &SemaphoreFacts{Key: j.ConcKey}
	q, args := d.GetSemaphore(j.ConcKey)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		if sf.Row, err = scanSemaphore(rows); err != nil {
			rows.Close()
			return nil, err
		}
		sf.Found = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	q, args = d.SlotHolders(j.ConcKey, maxHolders)
	if sf.Holders, err = queryInt64s(ctx, ex, q, args); err != nil {
		return nil, err
	}
	if j.State == StateBlocked {
		q, args := d.BlockedAhead(j.ConcKey, j.Queue, j.Priority, j.ID, MaxAhead+1)
		if sf.Ahead, err = s.boundedCount(ctx, ex, "blocked ahead", q, args, MaxAhead); err != nil {
			return nil, err
		}
	}
	return sf, nil
}

// queryBool reads one boolean; no row reads as false.
func queryBool(ctx context.Context, ex Executor, q string, args []any) (bool, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var v bool
	for rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return false, err
		}
	}
	return v, rows.Err()
}

// queryString reads one nullable string; no row or NULL reads as "".
func queryString(ctx context.Context, ex Executor, q string, args []any) (string, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var v nullString
	for rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return "", err
		}
	}
	return v.String, rows.Err()
}
