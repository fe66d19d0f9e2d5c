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
// (lim may be nil: then only a queue limit it waits on). It returns
// ErrNotFound for an id that does not exist.
func (s *Store) ExplainFacts(ctx context.Context, id int64, now time.Time, lim Limits) (*ExplainFacts, error) {
	d, err := s.dash()
	if err != nil {
		return nil, err
	}
	j, err := s.GetJob(ctx, id)
	if err != nil {
		return nil, err // "job N: not found"; saying it is an explain is the caller's part (the CLI prefixes "explain: ")
	}
	f := &ExplainFacts{Job: j, Now: now, Deferrals: j.Deferrals, LastDeferral: j.DeferralReason}
	wrap := func(what string, err error) error { return s.wrap(fmt.Errorf("explain job %d: %s: %w", id, what, err)) }
	count := func(what, q string, args []any) (Count, error) {
		c, err := s.boundedCount(ctx, what, q, args, MaxAhead)
		if err != nil {
			return Count{}, wrap(what, err)
		}
		return c, nil
	}

	q, args := d.QueuePaused(j.Queue)
	if f.QueuePaused, err = queryBool(ctx, s.db, q, args); err != nil {
		return nil, wrap("queue paused", err)
	}
	q, args = d.CoalesceKey(id)
	if f.CoalesceKey, err = queryString(ctx, s.db, q, args); err != nil {
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
		if bf.Row, bf.Found, err = s.GetBudgetInfo(ctx, rk.Key); err != nil {
			return nil, err
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
	if j.State == StateReady {
		q, args := d.ReadyAhead(j.Queue, j.Priority, id, MaxAhead+1)
		if f.ReadyAhead, err = count("ready ahead", q, args); err != nil {
			return nil, err
		}
	}
	if j.ConcKey != "" {
		if f.Semaphore, err = s.semaphoreFacts(ctx, d, j); err != nil {
			return nil, wrap("concurrency key", err)
		}
	}
	fin, err := s.FinishedSince(ctx, now.Add(-time.Minute), time.Minute)
	if err != nil {
		return nil, err
	}
	for _, x := range fin {
		if x.Queue == j.Queue && x.State != StateCancelled {
			f.FinishedLastMinute += x.Count
		}
	}
	return f, nil
}

// semaphoreFacts reads a job's concurrency key: its semaphore, holders,
// and the blocked jobs before the job.
func (s *Store) semaphoreFacts(ctx context.Context, d DashboardDialect, j *JobInfo) (*SemaphoreFacts, error) {
	sf := &SemaphoreFacts{Key: j.ConcKey}
	q, args := d.GetSemaphore(j.ConcKey)
	rows, err := s.db.Query(ctx, q, args...)
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
	if sf.Holders, err = queryInt64s(ctx, s.db, q, args); err != nil {
		return nil, err
	}
	if j.State == StateBlocked {
		q, args := d.BlockedAhead(j.ConcKey, j.Queue, j.Priority, j.ID, MaxAhead+1)
		if sf.Ahead, err = s.boundedCount(ctx, "blocked ahead", q, args, MaxAhead); err != nil {
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
