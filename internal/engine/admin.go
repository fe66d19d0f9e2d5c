package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	if _, err := s.execAlone(ctx, q, args); err != nil {
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
	return s.getJob(ctx, s.db, id)
}

// getJob is GetJob through ex.
func (s *Store) getJob(ctx context.Context, ex Executor, id int64) (*JobInfo, error) {
	q, args := s.q.GetJob(id)
	jobs, err := s.queryJobInfos(ctx, ex, q, args)
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
		var fairKey nullString
		var fairStart nullInt64
		j, err := scanJob(rows, append([]any{&state, &attempted, &finished, &pid, &lastErr, &concLimit, &concDuration, &concDiscard, &fairKey, &fairStart}, extra...)...)
		if err != nil {
			return nil, err
		}
		info := &JobInfo{Job: *j, State: State(state), ProcessID: pid.Int64, LastError: lastErr.String, FairKey: fairKey.String, FairStart: fairStart.Int64}
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
// takes a slot (unless it holds one), or is blocked. A parked job leaves
// its budget's count of parked jobs (uncountParked). Running and completed
// jobs are refused. It returns the jobs it moved, each with the state it
// is now in (ready or blocked); see operate for refusals.
func (s *Store) RetryJobs(ctx context.Context, c Clock, ids []int64) ([]Moved, error) {
	now := c.Host()
	return s.operate(ctx, ids, "retry", "retried", []State{StateFailed, StateCancelled, StateScheduled, StateParked, StateReady}, operateNotes{},
		func(ctx context.Context, tx Tx, j *JobInfo) ([]Stmt, State, error) {
			t := Transition{ID: j.ID, State: StateReady, RunAt: now, AttemptDelta: -j.Attempt}
			var writes []Stmt
			if j.Conc != nil && !j.HoldsSlot {
				sl, err := s.lockSlots(ctx, tx, []string{j.Conc.Key}, c)
				if err != nil {
					return nil, "", err
				}
				if sl.take(j.Conc) {
					writes = append(writes, stmt(s.q.MarkSlots([]int64{j.ID}, true)))
				} else {
					t.State = StateBlocked
				}
				writes = append(writes, sl.writes()...)
			}
			writes = append(writes, s.uncountParked(j)...)
			return append([]Stmt{stmt(s.q.SetJobs(j.State, 0, Micros(now), setRows([]Transition{t}, Micros(now))))}, writes...), t.State, nil
		})
}

// CancelJobs discards jobs that have not finished and are not running,
// recording reason; a job that held a concurrency slot gives it back, and
// a parked job leaves its budget's count of parked jobs. A
// fair job that was never claimed gives back its key's charge, once the
// jobs are cancelled (refundFair). It returns the jobs it moved; see
// operate for refusals.
func (s *Store) CancelJobs(ctx context.Context, c Clock, ids []int64, reason string) ([]Moved, error) {
	if reason == "" {
		reason = "cancelled by an operator"
	}
	if err := CheckReason(reason); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	now := c.Host()
	// The fair jobs to refund are those read never claimed by the attempt
	// that committed (operateNotes.onMoved): a job read unclaimed by an
	// attempt that failed may have been claimed, and run, before the
	// retry locked it again.
	var dead []*JobInfo
	unclaimed := func(j *JobInfo) {
		if j.FairKey != "" && j.Claims == 0 {
			dead = append(dead, j)
		}
	}
	// A fair job cancelled before, never claimed, is refused again but
	// still has its turns given back: a refund that failed after its
	// cancel committed (a crash, a lost connection) is done by cancelling
	// again. The refund only lowers a key's finish, so doing it twice
	// changes nothing more.
	again := func(j *JobInfo) {
		if j.State == StateCancelled {
			unclaimed(j)
		}
	}
	moved, err := s.operate(ctx, ids, "cancel", "cancelled", []State{StateReady, StateScheduled, StateParked, StateBlocked, StateFailed},
		operateNotes{onMoved: unclaimed, onRefused: again},
		func(ctx context.Context, tx Tx, j *JobInfo) ([]Stmt, State, error) {
			t := Transition{ID: j.ID, State: StateCancelled, Error: reason, Finished: true}
			writes := []Stmt{stmt(s.q.SetJobs(j.State, 0, Micros(now), setRows([]Transition{t}, Micros(now))))}
			if j.HoldsSlot {
				gives, _, err := s.giveBack(ctx, tx, c, holders{j.ID: j.ConcKey})
				if err != nil {
					return nil, "", err
				}
				writes = append(writes, gives...)
			}
			return append(writes, s.uncountParked(j)...), StateCancelled, nil
		})
	if rerr := s.refundFair(ctx, dead); rerr != nil {
		return moved, errors.Join(err, rerr)
	}
	return moved, err
}

// uncountParked is the statement that takes a parked job an operator
// moves away off its budget's count of parked jobs (the count that
// `sluice budgets`, the dashboard and explain show, and that brings the
// dispatcher back to the budget); none for a job in another state. It
// runs last in the job's transaction: after the job's row and any
// semaphore, as every transaction that waits for a budget locks them.
// Without it the count stayed at its old value until the budget next
// unparked (a slot away, an hour for a limit of one an hour).
func (s *Store) uncountParked(j *JobInfo) []Stmt {
	if j.State != StateParked || j.WaitKey == "" {
		return nil
	}
	return []Stmt{stmt(s.q.UncountParked(j.WaitKey))}
}

// refundFair gives back the charge of fair jobs cancelled before any
// claim, which enqueue charged to their keys' finishes
// (RefundFairKeys): per level and key, from the cancelled job with the
// lowest start. It runs in a transaction of its own, after the jobs'
// own have committed, and locks only fairness keys, in the order an
// enqueue does (levels by queue and priority, keys in byte order):
// a cancel holds a job's row, and an enqueue that holds a key's row
// may wait for a job's (the pending job a coalescing call joins), so
// taking the key in the cancel's transaction could deadlock with it.
// Two statements per level and run of keys (their locks, then the
// update); none without fair jobs.
func (s *Store) refundFair(ctx context.Context, dead []*JobInfo) error {
	if len(dead) == 0 {
		return nil
	}
	first := map[fairLevel]map[string]*JobInfo{}
	for _, j := range dead {
		l := fairLevel{j.Queue, j.Priority}
		if first[l] == nil {
			first[l] = map[string]*JobInfo{}
		}
		if f := first[l][j.FairKey]; f == nil || j.FairStart < f.FairStart {
			first[l][j.FairKey] = j
		}
	}
	levels := slices.SortedFunc(maps.Keys(first), compareLevels)
	var stmts []Stmt
	for _, l := range levels {
		keys := slices.Sorted(maps.Keys(first[l]))
		for run := range s.keyRuns(keys) {
			ids := make([]int64, len(run))
			for i, k := range run {
				ids[i] = first[l][k].ID
			}
			// Locked first, in key order (an update locks its rows in no
			// set order), and so that the update, a statement of its
			// own, sees the jobs an enqueue that held a key committed
			// meanwhile (in one statement PostgreSQL and MySQL would
			// read them as of its start).
			stmts = append(stmts, query(s.q.LockFairKeys(l.queue, l.priority, run)))
			stmts = append(stmts, stmt(s.q.RefundFairKeys(l.queue, l.priority, run, ids)))
		}
	}
	err := s.inTx(ctx, func(tx Tx) error {
		return pipeline(ctx, tx, stmts, func(int, Rows) error { return nil })
	})
	if err != nil {
		return s.wrap(fmt.Errorf("cancel: give back fairness keys' turns (cancelling the same jobs again retries it): %w", err))
	}
	return nil
}

// Moved is a job an operator's action moved, and the state it is now in.
type Moved struct {
	ID    int64
	State State
}

// ErrNotAllowed is returned for a job whose state an operator's action
// does not apply to: a running job cannot be retried, a completed one
// cannot be cancelled.
var ErrNotAllowed = errors.New("not allowed in its state")

// notAllowed is an ErrNotAllowed that says which job, in which state.
type notAllowed string

func (e notAllowed) Error() string        { return string(e) }
func (e notAllowed) Is(target error) bool { return target == ErrNotAllowed }

// orStates lists states as "a, b or c".
func orStates(ss []State) string {
	s := joinStates(ss[:len(ss)-1])
	if s == "" {
		return string(ss[len(ss)-1])
	}
	return s + " or " + string(ss[len(ss)-1])
}

// operateNotes are what an operator's action learns of each job, once
// the job's transaction ended: onMoved gets the job as the attempt that
// committed read it (locked), onRefused the job of a refusal for its
// state, as the attempt that refused it read it. Either may be nil. They
// run after the transaction, never for an attempt that failed and was
// retried, so that nothing an attempt saw survives into the next
// (DESIGN.md invariant 6): the job it read may have changed before the
// retry locked it again.
type operateNotes struct {
	onMoved, onRefused func(*JobInfo)
}

// operate applies an operator's action to each job in turn, each in its
// own transaction. A job that does not exist (ErrNotFound) or whose state
// the action does not apply to (ErrNotAllowed) is refused, and the others
// are still acted on: the error joins one error per refused job, each
// naming it. Any other error stops at the job it happened on. It returns
// the jobs it moved, in the order given, with their new states; notes
// learns of the jobs as the attempts that settled them read them. act
// runs once per attempt, in it: what it computes must stay in its
// statements and state, never in the caller's variables.
func (s *Store) operate(ctx context.Context, ids []int64, verb, done string, allowed []State, notes operateNotes,
	act func(context.Context, Tx, *JobInfo) ([]Stmt, State, error)) ([]Moved, error) {
	var moved []Moved
	var refused []error
	var stopped error
	for _, id := range ids {
		var to State
		var read, refusedJob *JobInfo // the job as the last attempt read it
		err := s.inTx(ctx, func(tx Tx) error {
			to, read, refusedJob = "", nil, nil
			q, args := s.q.LockJob(id)
			js, err := s.queryJobInfos(ctx, tx, q, args)
			if err != nil {
				return err
			}
			if len(js) == 0 {
				return fmt.Errorf("cannot %s job %d: %w", verb, id, ErrNotFound)
			}
			j := js[0]
			read = j
			if !slices.Contains(allowed, j.State) {
				refusedJob = j
				return notAllowed(fmt.Sprintf("cannot %s job %d: it is %s, and only %s jobs can be %s",
					verb, id, j.State, orStates(allowed), done))
			}
			writes, state, err := act(ctx, tx, j)
			if err != nil {
				return err
			}
			to = state
			return pipeline(ctx, tx, writes, nil)
		})
		switch {
		case err == nil:
			moved = append(moved, Moved{ID: id, State: to})
			if notes.onMoved != nil {
				notes.onMoved(read)
			}
		case errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotAllowed):
			refused = append(refused, err)
			if notes.onRefused != nil && refusedJob != nil {
				notes.onRefused(refusedJob)
			}
		default:
			stopped = s.wrap(fmt.Errorf("%s job %d: %w", verb, id, err))
		}
		if stopped != nil {
			break
		}
	}
	if len(moved) > 0 {
		s.Wake("*")
		if err := s.notify(ctx, s.db, []string{"*"}); err != nil && stopped == nil {
			stopped = err
		}
	}
	return moved, errors.Join(append(refused, stopped)...)
}
