package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrNotFound is returned for a job id that does not exist.
var ErrNotFound = errors.New("not found")

// PauseQueue stops workers claiming from a queue; its jobs stay where they
// are. Pausing a paused queue does nothing.
func (s *Store) PauseQueue(ctx context.Context, queue string, now time.Time) error {
	return s.setPaused(ctx, queue, true, now)
}

// ResumeQueue lets workers claim from a paused queue again.
func (s *Store) ResumeQueue(ctx context.Context, queue string, now time.Time) error {
	return s.setPaused(ctx, queue, false, now)
}

func (s *Store) setPaused(ctx context.Context, queue string, paused bool, now time.Time) error {
	if err := CheckQueue("queue", queue); err != nil {
		return err // a name no job's queue can have (on MySQL "mail " would be "mail")
	}
	q, args := s.q.SetQueuePaused(queue, paused, Micros(now))
	if _, err := exec(ctx, s.db, q, args); err != nil {
		return s.wrap(fmt.Errorf("pause queue %s: %w", queue, err))
	}
	return nil
}

// QueueInfo is a queue and whether it is paused.
type QueueInfo struct {
	Name   string
	Paused bool
}

// ListQueues lists the queues that hold jobs or were ever paused.
func (s *Store) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	rows, err := s.db.Query(ctx, s.q.ListQueues())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("list queues: %w", err))
	}
	defer rows.Close()
	var out []QueueInfo
	for rows.Next() {
		var q QueueInfo
		if err := rows.Scan(&q.Name, &q.Paused); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// QueueStats counts a queue's jobs by state.
type QueueStats struct {
	Queue  string
	Counts map[State]int64
}

// Stats counts jobs per queue and state, queues in name order.
func (s *Store) Stats(ctx context.Context) ([]QueueStats, error) {
	return s.countByState(ctx, s.q.JobsByState())
}

// Depth counts the jobs that are not completed or cancelled, per queue and
// state: what a metrics scrape asks for, without counting the finished
// jobs kept.
func (s *Store) Depth(ctx context.Context) ([]QueueStats, error) {
	return s.countByState(ctx, s.q.UnfinishedByState())
}

// Oldest is the oldest job waiting to run in a queue.
type Oldest struct {
	Queue string
	// Throttled is set for jobs a limit holds: waiting on a rate limit, or
	// blocked on a concurrency slot.
	Throttled bool
	// Since is when the job began to wait: its run_at for a job no limit
	// holds, ready or still scheduled (one scheduled ahead, or retried
	// after a backoff, could not run before; one due that no dispatcher
	// made ready waits all the same), its enqueue for one a limit holds.
	// It is ahead of now for a queue whose oldest such job is not due
	// yet: a caller counts it as 0 s old.
	Since time.Time
}

// OldestWaiting returns, per queue, the oldest job waiting to run, split by
// whether a limit holds it, so that an alert on a stuck queue need not
// fire because a limit is working.
func (s *Store) OldestWaiting(ctx context.Context) ([]Oldest, error) {
	rows, err := s.db.Query(ctx, s.q.OldestWaiting())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("oldest waiting jobs: %w", err))
	}
	defer rows.Close()
	var out []Oldest
	for rows.Next() {
		var o Oldest
		var throttled, since int64
		if err := rows.Scan(&o.Queue, &throttled, &since); err != nil {
			return nil, err
		}
		o.Throttled, o.Since = throttled == 1, FromMicros(since)
		out = append(out, o)
	}
	return out, rows.Err()
}

func (s *Store) countByState(ctx context.Context, q string) ([]QueueStats, error) {
	rows, err := s.db.Query(ctx, q)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("stats: %w", err))
	}
	defer rows.Close()
	var out []QueueStats
	for rows.Next() {
		var queue, state string
		var n int64
		if err := rows.Scan(&queue, &state, &n); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Queue != queue {
			out = append(out, QueueStats{Queue: queue, Counts: map[State]int64{}})
		}
		out[len(out)-1].Counts[State(state)] += n // ready and parked come in a row per stream
	}
	return out, rows.Err()
}

// ListJobs lists jobs, newest first, filtered by f. A zero Limit lists 50.
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]*JobInfo, error) {
	return s.ListJobsVia(ctx, s.db, f)
}

// ListJobsVia is ListJobs through ex, such as a transaction that has not
// committed yet.
func (s *Store) ListJobsVia(ctx context.Context, ex Executor, f JobFilter) ([]*JobInfo, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	q, args := s.q.ListJobs(f)
	return s.queryJobInfos(ctx, ex, q, args)
}

// GetJob reads one job.
func (s *Store) GetJob(ctx context.Context, id int64) (*JobInfo, error) {
	q, args := s.q.GetJob(id)
	jobs, err := s.queryJobInfos(ctx, s.db, q, args)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return jobs[0], nil
}

func (s *Store) queryJobInfos(ctx context.Context, ex Executor, q string, args []any) ([]*JobInfo, error) {
	return s.queryJobInfosExtra(ctx, ex, q, args)
}

// queryJobInfosExtra reads JobInfoColumns and then, into extra, the
// columns that follow them (of the last row).
func (s *Store) queryJobInfosExtra(ctx context.Context, ex Executor, q string, args []any, extra ...any) ([]*JobInfo, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("list jobs: %w", err))
	}
	defer rows.Close()
	var out []*JobInfo
	for rows.Next() {
		var state string
		var attempted, finished, pid nullInt64
		var lastErr nullString
		var concLimit int
		var concDuration int64
		var concDiscard bool
		j, err := scanJob(rows, append([]any{&state, &attempted, &finished, &pid, &lastErr, &concLimit, &concDuration, &concDiscard}, extra...)...)
		if err != nil {
			return nil, err
		}
		info := &JobInfo{Job: *j, State: State(state), ProcessID: pid.Int64, LastError: lastErr.String}
		if j.ConcKey != "" {
			info.Conc = &Conc{Key: j.ConcKey, To: concLimit, Duration: time.Duration(concDuration) * time.Microsecond, Discard: concDiscard}
		}
		if attempted.Valid {
			info.AttemptedAt = FromMicros(attempted.Int64)
		}
		if finished.Valid {
			info.FinishedAt = FromMicros(finished.Int64)
		}
		out = append(out, info)
	}
	return out, rows.Err()
}

// RetryJobs makes failed, cancelled, scheduled or parked jobs ready now,
// and resets the attempts of those (and of ready ones). A job with a concurrency limit
// takes a slot (unless it holds one), or is blocked. Running and completed
// jobs are refused. It returns the jobs it moved.
func (s *Store) RetryJobs(ctx context.Context, c Clock, ids []int64) ([]int64, error) {
	now := c.Host()
	return s.operate(ctx, ids, "retry", []State{StateFailed, StateCancelled, StateScheduled, StateParked, StateReady},
		func(ctx context.Context, tx Tx, j *JobInfo) ([]Stmt, error) {
			t := Transition{ID: j.ID, State: StateReady, RunAt: now, AttemptDelta: -j.Attempt}
			var writes []Stmt
			if j.Conc != nil && !j.HoldsSlot {
				sl, err := s.lockSlots(ctx, tx, []string{j.Conc.Key}, c)
				if err != nil {
					return nil, err
				}
				if sl.take(j.Conc) {
					writes = append(writes, stmt(s.q.MarkSlots([]int64{j.ID}, true)))
				} else {
					t.State = StateBlocked
				}
				writes = append(writes, sl.writes()...)
			}
			return append([]Stmt{stmt(s.q.SetJobs(j.State, 0, Micros(now), setRows([]Transition{t}, Micros(now))))}, writes...), nil
		})
}

// CancelJobs discards jobs that have not finished and are not running,
// recording reason; a job that held a concurrency slot gives it back. It
// returns the jobs it moved.
func (s *Store) CancelJobs(ctx context.Context, c Clock, ids []int64, reason string) ([]int64, error) {
	if reason == "" {
		reason = "cancelled by an operator"
	}
	if err := CheckReason(reason); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	now := c.Host()
	return s.operate(ctx, ids, "cancel", []State{StateReady, StateScheduled, StateParked, StateBlocked, StateFailed},
		func(ctx context.Context, tx Tx, j *JobInfo) ([]Stmt, error) {
			t := Transition{ID: j.ID, State: StateCancelled, Error: reason, Finished: true}
			writes := []Stmt{stmt(s.q.SetJobs(j.State, 0, Micros(now), setRows([]Transition{t}, Micros(now))))}
			if !j.HoldsSlot {
				return writes, nil
			}
			gives, _, err := s.giveBack(ctx, tx, c, holders{j.ID: j.ConcKey})
			return append(writes, gives...), err
		})
}

// operate applies an operator's action to each job in turn, each in its
// own transaction, refusing the first one that is not in an allowed state.
func (s *Store) operate(ctx context.Context, ids []int64, verb string, allowed []State,
	act func(context.Context, Tx, *JobInfo) ([]Stmt, error)) ([]int64, error) {
	var done []int64
	for _, id := range ids {
		err := s.inTx(ctx, func(tx Tx) error {
			q, args := s.q.LockJob(id)
			js, err := s.queryJobInfos(ctx, tx, q, args)
			if err != nil {
				return err
			}
			if len(js) == 0 {
				return fmt.Errorf("job %d: %w", id, ErrNotFound)
			}
			if j := js[0]; !slices.Contains(allowed, j.State) {
				return fmt.Errorf("job %d: it is %s (only %s jobs can be)", id, j.State, joinStates(allowed))
			}
			writes, err := act(ctx, tx, js[0])
			if err != nil {
				return err
			}
			return pipeline(ctx, tx, writes, nil)
		})
		if err != nil {
			return done, s.wrap(fmt.Errorf("%s: %w", verb, err))
		}
		done = append(done, id)
	}
	if len(done) > 0 {
		s.Wake("*")
		if err := s.notify(ctx, s.db, []string{"*"}); err != nil {
			return done, err
		}
	}
	return done, nil
}
