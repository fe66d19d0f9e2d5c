package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DashboardDialect is the SQL the dashboard and Explain read with, beside
// Dialect: every dialect of this module implements it (in its
// dashboard.go). All of it reads; none of it locks.
//
// Each statement reads through an index: per-state partial indexes on
// PostgreSQL and SQLite, per-state generated keys on MySQL. Counts over
// sets that may be large take a limit and count at most that many rows.
type DashboardDialect interface {
	// FinishedSince counts jobs finished (completed, cancelled or failed)
	// at or after since, per queue, state and bucket (finished_at divided
	// by bucket, both µs). Columns: queue, state, bucket, count.
	FinishedSince(since, bucket int64) (string, []any)
	// AdmittedSince reads up to limit jobs that carry rate keys and were
	// last claimed at or after since (running or finished), and lists
	// their rate keys and claim times: all of them, or with a key only
	// those that carry it (and maybe one other). Each row also says how
	// many jobs were read. Columns: rate_keys, attempted_at, read. See
	// AdmittedOf.
	AdmittedSince(key string, since int64, limit int) (string, []any)
	// PausedQueues lists the queues that were ever paused or resumed,
	// without reading the jobs. Columns: name, paused.
	PausedQueues() string
	// QueuePaused reads whether a queue is paused; no row means it is
	// not. Columns: paused.
	QueuePaused(queue string) (string, []any)
	// CoalesceKey reads the coalesce key a job holds (NULL for none).
	// Columns: coalesce_key.
	CoalesceKey(id int64) (string, []any)
	// ReadyAhead counts, up to limit, the ready jobs of a queue claimed
	// before (priority, id). Columns: count.
	ReadyAhead(queue string, priority int, id int64, limit int) (string, []any)
	// ParkedAhead counts, up to limit, the jobs parked on a budget that
	// get slots before (priority, id): those of queue, the job's own, and
	// of queues not paused (JobQueueNotPaused), as unparking passes
	// another paused queue's jobs over; a paused queue's own parked jobs
	// keep their places for the resume. Columns: count.
	ParkedAhead(key, queue string, priority int, id int64, limit int) (string, []any)
	// SlotsAhead counts, up to limit, the scheduled jobs waiting on a
	// budget whose slot comes before (runAt, id). Columns: count.
	SlotsAhead(key string, runAt, id int64, limit int) (string, []any)
	// BlockedAhead counts, up to limit, the jobs blocked on a concurrency
	// key that get a slot before (priority, id): those of queue, the
	// job's own, and of queues not paused (JobQueueNotPaused), as the
	// hand-out of slots passes another paused queue's jobs over; a paused
	// queue's own blocked jobs keep their places in the key's line for
	// the resume. Columns: count. (A fair job's place by (priority, id)
	// goes to the blocked fair job of its queue and priority with the
	// lowest start: for a fair job, an estimate.)
	BlockedAhead(key, queue string, priority int, id int64, limit int) (string, []any)
	// GetSemaphore reads one semaphore. Columns: SemaphoreColumns.
	GetSemaphore(key string) (string, []any)
	// SlotHolders lists up to limit jobs holding a slot of a concurrency
	// key, by id. Columns: id.
	SlotHolders(key string, limit int) (string, []any)
}

// JobPage selects a page of jobs for the dashboard. Zero fields do not
// filter.
type JobPage struct {
	State State
	Kind  string
	Queue string
	// WaitKey keeps the jobs waiting on (or last deferred by) one
	// rate-limit budget.
	WaitKey string
	// Before keeps ids below it: the last id of the previous page (keyset
	// pagination, no OFFSET). 0 starts from the newest job.
	Before int64
	// Limit is the page's size. Defaults to DefaultPageSize; at most
	// MaxPageSize.
	Limit int
}

// Count is a count that stops at a bound: Capped says there are at least
// N, maybe more.
type Count struct {
	N      int64 `json:"n"`
	Capped bool  `json:"capped"`
}

// String prints "1234", or "10000+" for a capped count.
func (c Count) String() string {
	if c.Capped {
		return fmt.Sprintf("%d+", c.N)
	}
	return fmt.Sprintf("%d", c.N)
}

// ErrNoDashboard is returned when the store's dialect does not implement
// DashboardDialect (a dialect from outside this module).
var ErrNoDashboard = errors.New("the store's dialect has no dashboard queries (store.DashboardDialect)")

func (s *Store) dash() (DashboardDialect, error) {
	d, ok := s.d.(DashboardDialect)
	if !ok {
		return nil, ErrNoDashboard
	}
	return d, nil
}

// PageJobs returns a page of jobs, newest first, and the id to pass as
// Before for the next page (0 when this is the last).
func (s *Store) PageJobs(ctx context.Context, f JobPage) ([]*JobInfo, int64, error) {
	if _, err := s.dash(); err != nil {
		return nil, 0, err
	}
	want := pageSize(f.Limit)
	f.Limit = want + 1 // one more says whether a next page exists
	q, args := s.q.PageJobs(f)
	js, err := s.queryJobInfos(ctx, s.db, q, args)
	if err != nil {
		return nil, 0, fmt.Errorf("page jobs: %w", err)
	}
	if js, more := cutPage(js, want); more {
		return js, js[want-1].ID, nil
	}
	return js, 0, nil
}

// CountJobs counts the jobs f selects, up to limit.
func (s *Store) CountJobs(ctx context.Context, f JobPage, limit int) (Count, error) {
	if _, err := s.dash(); err != nil {
		return Count{}, err
	}
	q, args := s.q.CountJobs(f, limit+1)
	return s.boundedCount(ctx, s.db, "count jobs", q, args, limit)
}

// JobIDs returns the ids of up to limit jobs f selects (ignoring its
// Before and Limit), newest first: the set a bulk action applies to.
func (s *Store) JobIDs(ctx context.Context, f JobPage, limit int) ([]int64, error) {
	if _, err := s.dash(); err != nil {
		return nil, err
	}
	f.Before, f.Limit = 0, limit
	q, args := s.q.PageJobIDs(f)
	ids, err := queryInt64s(ctx, s.db, q, args)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("job ids: %w", err))
	}
	return ids, nil
}

// boundedCount runs through ex a count whose statement counts up to
// limit+1 rows.
func (s *Store) boundedCount(ctx context.Context, ex Executor, what, q string, args []any, limit int) (Count, error) {
	n, err := queryInt64s(ctx, ex, q, args)
	if err != nil {
		return Count{}, s.wrap(fmt.Errorf("%s: %w", what, err))
	}
	if len(n) != 1 {
		return Count{}, fmt.Errorf("%s: got %d rows", what, len(n))
	}
	if n[0] > int64(limit) {
		return Count{N: int64(limit), Capped: true}, nil
	}
	return Count{N: n[0]}, nil
}

// PausedQueues lists the queues that were ever paused or resumed, and
// whether they are paused now. Unlike ListQueues it does not read the jobs
// table, so it costs nothing however many jobs are kept.
func (s *Store) PausedQueues(ctx context.Context) ([]QueueInfo, error) {
	d, err := s.dash()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, d.PausedQueues())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("paused queues: %w", err))
	}
	defer rows.Close()
	var out []QueueInfo
	for rows.Next() {
		var q QueueInfo
		if err := rows.Scan(&q.Name, &q.Paused); err != nil {
			return nil, fmt.Errorf("paused queues: %w", err)
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// Finished is how many jobs of a queue finished in one state during one
// bucket of time.
type Finished struct {
	Queue string
	State State
	// At is the bucket's start.
	At    time.Time
	Count int64
}

// FinishedSince counts the jobs that finished (completed, cancelled or
// failed) since the given time, per queue, state and bucket of the given
// width. Jobs deleted on completion (DeleteOnComplete) are not counted.
func (s *Store) FinishedSince(ctx context.Context, since time.Time, bucket time.Duration) ([]Finished, error) {
	d, err := s.dash()
	if err != nil {
		return nil, err
	}
	return s.finishedSince(ctx, s.db, d, since, bucket)
}

// finishedSince is FinishedSince through ex.
func (s *Store) finishedSince(ctx context.Context, ex Executor, d DashboardDialect, since time.Time, bucket time.Duration) ([]Finished, error) {
	if bucket < time.Microsecond {
		return nil, fmt.Errorf("finished since: bucket %s is under 1µs", bucket)
	}
	width := bucket.Microseconds()
	q, args := d.FinishedSince(Micros(since), width)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("finished since: %w", err))
	}
	defer rows.Close()
	var out []Finished
	for rows.Next() {
		var f Finished
		var state string
		var b int64
		if err := rows.Scan(&f.Queue, &state, &b, &f.Count); err != nil {
			return nil, fmt.Errorf("finished since: %w", err)
		}
		f.State, f.At = State(state), FromMicros(b*width)
		out = append(out, f)
	}
	return out, rows.Err()
}

// AdmittedOf makes a dialect's AdmittedSince from scan, its read of up to
// limit recently claimed jobs (columns rate_keys, attempted_at), and match,
// a condition on rate_keys that holds for the jobs that carry one key, or
// "" for all of them. The scan stays bounded by its limit whatever the
// key, and the rows that come back are the matching ones and one other,
// which brings the count of jobs read (read) when none matches.
func AdmittedOf(scan, match string) string {
	q := `SELECT rate_keys, attempted_at, n FROM (SELECT rate_keys, attempted_at, count(*) OVER () AS n, row_number() OVER () AS r FROM (` +
		scan + `) a) b`
	if match != "" {
		q += ` WHERE r = 1 OR ` + match
	}
	return q
}

// AdmissionsSince returns, per budget key, the claim times of the jobs
// claimed through it since the given time that are running or finished
// (a job of cost c counts c times): of every key, or with key of that
// key alone, which the database picks out (the others are not read). It
// reads at most limit jobs that carry rate keys, of every key; capped
// says the limit was reached, so times may be missing. Jobs deleted on
// completion, and jobs waiting for a retry, are not seen.
func (s *Store) AdmissionsSince(ctx context.Context, key string, since time.Time, limit int) (admitted map[string][]time.Time, capped bool, err error) {
	d, err := s.dash()
	if err != nil {
		return nil, false, err
	}
	q, args := d.AdmittedSince(key, Micros(since), limit)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, false, s.wrap(fmt.Errorf("admissions since: %w", err))
	}
	defer rows.Close()
	admitted = map[string][]time.Time{}
	var read int64
	for rows.Next() {
		var keys nullString
		var at int64
		if err := rows.Scan(&keys, &at, &read); err != nil {
			return nil, false, fmt.Errorf("admissions since: %w", err)
		}
		for _, rk := range DecodeRateKeys(keys.String) {
			if key != "" && rk.Key != key {
				continue
			}
			for range rk.Cost {
				admitted[rk.Key] = append(admitted[rk.Key], FromMicros(at))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, s.wrap(fmt.Errorf("admissions since: %w", err))
	}
	return admitted, read >= int64(limit), nil
}

// GetBudgetInfo reads one budget's row without locking it; found is false
// when the budget has no row (it is idle, or was never used).
// BudgetWaiting reads it with how many jobs wait on it.
func (s *Store) GetBudgetInfo(ctx context.Context, key string) (b BudgetRow, found bool, err error) {
	return s.budgetInfo(ctx, s.db, key)
}

// budgetInfo is GetBudgetInfo through ex.
func (s *Store) budgetInfo(ctx context.Context, ex Executor, key string) (b BudgetRow, found bool, err error) {
	q, args := s.q.GetBudget(key)
	rows, err := queryBudgets(ctx, ex, q, args)
	if err != nil {
		return BudgetRow{}, false, s.wrap(fmt.Errorf("budget %s: %w", key, err))
	}
	if len(rows) == 0 {
		return BudgetRow{Name: key}, false, nil
	}
	return rows[0], true, nil
}

// JobCalls returns the args of every call a coalescing job collected,
// oldest first (none for a job that collected one call).
func (s *Store) JobCalls(ctx context.Context, id int64) ([][]byte, error) {
	q, args := s.q.LoadCalls([]int64{id})
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("calls of job %d: %w", id, err))
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var jobID int64
		var a string
		if err := rows.Scan(&jobID, &a); err != nil {
			return nil, fmt.Errorf("calls of job %d: %w", id, err)
		}
		out = append(out, []byte(a))
	}
	return out, rows.Err()
}
