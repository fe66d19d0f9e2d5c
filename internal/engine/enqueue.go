package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrKeyTooLong is wrapped by the error an enqueue returns for a key longer
// than the database's key column holds.
var ErrKeyTooLong = errors.New("key too long")

// IDStep is how far apart the ids of one multi-row insert are on
// databases that report only the first (MySQL's auto_increment_increment).
// Dialects that need it set it when they open.
type IDStep interface{ IDStep() int64 }

// Enqueue adds jobs through ex (the store's pool when nil) and returns
// what became of each, in the order given. Every job is checked before
// anything is written, and the call is all or nothing: a bad job writes
// none of them, and the error names its index. Plain jobs are inserted in
// batches of at most MaxInsertBatch (one transaction for the lot when
// there are several); a job that coalesces joins the pending job of its
// key or creates it, and a job with a concurrency limit declares it on
// its key and, ready, takes a slot (or is blocked or discarded) — those
// in one transaction:
// the caller's, or the store's own. c stamps the jobs (created_at is the
// caller's time) and the concurrency slots they take.
//
// In the caller's transaction (ex is not the pool) a write of several
// statements runs under a savepoint that a failure rolls back to: the
// transaction then holds none of the jobs, should the caller commit it
// after the error, and on PostgreSQL it goes on (the rollback to the
// savepoint ends the abort the failed statement began). A single insert
// needs none: it is all or nothing as it is.
func (s *Store) Enqueue(ctx context.Context, ex Executor, c Clock, jobs []NewJob) ([]Enqueued, error) {
	return s.enqueue(ctx, ex, false, c, jobs)
}

// EnqueueUnder is Enqueue in the transaction m was set in, which the
// caller rolls back to m should the enqueue fail (enqueue middleware's
// savepoint in the caller's transaction): the write sets no savepoint of
// its own.
func (s *Store) EnqueueUnder(ctx context.Context, m Mark, c Clock, jobs []NewJob) ([]Enqueued, error) {
	return s.enqueue(ctx, m.ex, true, c, jobs)
}

// enqueue is Enqueue; guarded says that a failure through ex, when it is
// not the pool, is undone without the write's help: ex is a transaction
// of the store's own, which a failure rolls back whole (EnqueueOpen's),
// or the caller rolls back to a savepoint of its own (EnqueueUnder). The
// writes then run without a savepoint.
func (s *Store) enqueue(ctx context.Context, ex Executor, guarded bool, c Clock, jobs []NewJob) ([]Enqueued, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if ex == nil {
		ex = s.db
	}
	if err := s.checkSchema(ctx, ex); err != nil {
		return nil, err
	}
	now := c.Host()
	rows := make([]InsertRow, len(jobs))
	plain := true
	for i, j := range jobs {
		row, err := s.insertRow(j, now)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("enqueue: job %d (%s): %w", i, j.Kind, err)
			}
			return nil, fmt.Errorf("enqueue %s: %w", j.Kind, err)
		}
		rows[i] = row
		// A job with a concurrency limit declares it, delayed or not.
		plain = plain && j.Coalesce == nil && row.ConcKey == "" && j.FairKey == ""
	}
	var out []Enqueued
	var err error
	switch {
	case plain:
		var ids []int64
		switch {
		case s.batchEnd(rows, 0) == len(rows) && ex == s.db:
			// One statement: all or nothing as it is, and written again
			// after a deadlock or serialization failure, as a transaction
			// of the store's is.
			err = s.retryTx(ctx, func() error {
				ids, err = s.insertAll(ctx, ex, rows)
				return err
			})
		case s.batchEnd(rows, 0) == len(rows):
			ids, err = s.insertAll(ctx, ex, rows)
		case ex == s.db:
			err = s.inTx(ctx, func(tx Tx) error {
				ids, err = s.insertAll(ctx, tx, rows)
				return err
			})
		case guarded:
			ids, err = s.insertAll(ctx, ex, rows)
		default:
			ids, err = s.insertAllIn(ctx, ex, rows)
		}
		if err == nil {
			out = make([]Enqueued, len(ids))
			for i, id := range ids {
				out[i] = Enqueued{ID: id, State: rows[i].State}
			}
		} else if len(rows) > 1 {
			err = s.blame(ctx, ex, rows, jobs, err)
		}
	case ex == s.db:
		err = s.inTx(ctx, func(tx Tx) error {
			// enqueueTx changes its rows: every attempt starts from the
			// rows as checked.
			out, err = s.enqueueTx(ctx, tx, c, jobs, slices.Clone(rows))
			return err
		})
	case guarded:
		out, err = s.enqueueTx(ctx, ex, c, jobs, rows)
	default:
		out, err = s.enqueueTxIn(ctx, ex, c, jobs, rows)
	}
	if err != nil {
		return nil, s.wrap(fmt.Errorf("enqueue: %w", err))
	}
	return out, nil
}

// EnqueueOpen is Enqueue in a transaction of the store's own that it
// leaves open: the caller commits it once the rest of its work succeeded
// (enqueue middleware that runs after the write), or rolls it back. The
// jobs are written as Enqueue writes them in a caller's transaction. A
// deadlock or serialization failure rolls the transaction back and writes
// the jobs again in a new one, as Enqueue does in its own; a failure of
// the caller's commit is not retried. The transaction begins with txCtx,
// which must outlive the commit (database/sql rolls a transaction back
// when the context it began with ends); its statements run with ctx.
func (s *Store) EnqueueOpen(txCtx, ctx context.Context, c Clock, jobs []NewJob) (Tx, []Enqueued, error) {
	var out []Enqueued
	begin := func(context.Context) (Tx, error) {
		tx, err := s.db.Begin(txCtx)
		if err != nil {
			return nil, fmt.Errorf("enqueue: begin: %w", err)
		}
		return tx, nil
	}
	tx, err := s.openTx(ctx, begin, func(tx Tx) error {
		var err error
		out, err = s.enqueue(ctx, tx, true, c, jobs)
		return err
	})
	if err != nil {
		return nil, nil, err // Enqueue's errors say what failed
	}
	return tx, out, nil
}

// Mark is a savepoint in a transaction, set by MarkTx: Undo rolls the
// transaction back to it, Keep forgets it and keeps what ran since.
type Mark struct {
	s  *Store
	ex Executor
	// n names the savepoint apart from any other mark (sluice_mark_n), so
	// that marks nest — an enqueue that middleware makes inside another's,
	// a batch's savepoint inside the middleware's — on MySQL too, which
	// replaces a savepoint of the same name instead.
	n uint64
}

// MarkTx sets a savepoint in the transaction ex: before an enqueue whose
// fate is decided after its write (enqueue middleware that runs after
// next), before the statements of an enqueue in the caller's transaction
// or of a migration in a run's, so that a failure can leave the
// transaction as it was (and, on PostgreSQL, a failed statement's abort
// undone). Marks nest: each has a savepoint of its own.
func (s *Store) MarkTx(ctx context.Context, ex Executor) (Mark, error) {
	m := Mark{s: s, ex: ex, n: s.marks.Add(1)}
	if _, err := ex.Exec(ctx, m.named(s.q.savepoint)); err != nil {
		return Mark{}, s.wrap(fmt.Errorf("savepoint: %w", err))
	}
	return m, nil
}

// named is a savepoint statement of the catalog (which ends with the
// savepoint's name) for this mark's own savepoint.
func (m Mark) named(stmt string) string {
	return strings.TrimRight(stmt, "; \n") + "_" + strconv.FormatUint(m.n, 10)
}

// Undo rolls the transaction back to the mark and forgets it.
func (m Mark) Undo(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if _, err := m.ex.Exec(ctx, m.named(m.s.q.rollbackToSavepoint)); err != nil {
		return m.s.wrap(fmt.Errorf("roll back to the savepoint: %w", err))
	}
	return m.Keep(ctx)
}

// Keep forgets the mark, keeping what ran since it.
func (m Mark) Keep(ctx context.Context) error {
	if _, err := m.ex.Exec(context.WithoutCancel(ctx), m.named(m.s.q.releaseSavepoint)); err != nil {
		return m.s.wrap(fmt.Errorf("release the savepoint: %w", err))
	}
	return nil
}

// blame finds which of rows the database refused, after a multi-row insert
// through ex failed with err: it inserts halves in transactions that always
// roll back, down to one row, and names it. A failure that is not a row's
// own (the connection, the schema) is returned as it was.
//
// In the caller's transaction (ex is not the pool) it probes inside that
// transaction, under a savepoint it rolls back to after each probe: a
// transaction of the pool's could wait for the caller's for ever (SQLite's
// one connection, or its one writer). Where a failed statement has aborted
// the caller's transaction (PostgreSQL) the savepoint is refused, and the
// probes take transactions of the pool's, which then wait for nothing.
func (s *Store) blame(ctx context.Context, ex Executor, rows []InsertRow, jobs []NewJob, err error) error {
	if ctx.Err() != nil || s.d.IsUndefinedTable(err) || s.retryable(err) {
		return err
	}
	refused := func(lo, hi int) error {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return nil
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		_, err = s.insertAll(ctx, tx, rows[lo:hi])
		return err
	}
	if ex != s.db {
		inPool := refused
		refused = func(lo, hi int) error {
			ran, err := s.underSavepoint(ctx, ex, true, func() error {
				_, err := s.insertAll(ctx, ex, rows[lo:hi])
				return err
			})
			if !ran {
				return inPool(lo, hi)
			}
			return err
		}
	}
	lo, hi := 0, len(rows)
	if refused(lo, hi) == nil {
		return err // it was not the rows
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if refused(lo, mid) != nil {
			hi = mid
		} else {
			lo = mid
		}
	}
	if e := refused(lo, hi); e != nil {
		return fmt.Errorf("job %d (%s): %w", lo, jobs[lo].Kind, e)
	}
	return err
}

// insertAllIn inserts rows in batches in the caller's transaction, under
// a savepoint it rolls back to if one fails, so that the transaction holds
// all of them or none even should the caller commit after the error. (On
// PostgreSQL, where the error aborts the transaction, the rollback to the
// savepoint also ends the abort: the transaction goes on there too.)
func (s *Store) insertAllIn(ctx context.Context, tx Executor, rows []InsertRow) (ids []int64, err error) {
	_, err = s.underSavepoint(ctx, tx, false, func() error {
		ids, err = s.insertAll(ctx, tx, rows)
		return err
	})
	return ids, err
}

// enqueueTxIn is enqueueTx in the caller's transaction tx, under a
// savepoint it rolls back to if the enqueue fails, as insertAllIn does
// for plain jobs: the jobs written before a statement the database
// refused (a trigger, a check, a deadlock) are undone, so that the
// transaction holds all of them or none even should the caller commit
// after the error, and on PostgreSQL the transaction goes on. The rows
// the enqueue created (coalesce keys' rows, semaphores, fairness keys)
// and its changes to them are undone too. Where the database releases
// the locks taken since a savepoint on a rollback to it (PostgreSQL,
// MariaDB; SQLite's one writer holds its lock anyway) nothing of the
// enqueue stays; MySQL 8's InnoDB keeps the row locks taken since the
// savepoint until the transaction ends.
func (s *Store) enqueueTxIn(ctx context.Context, tx Executor, c Clock, jobs []NewJob, rows []InsertRow) (out []Enqueued, err error) {
	_, err = s.underSavepoint(ctx, tx, false, func() error {
		out, err = s.enqueueTx(ctx, tx, c, jobs, rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// underSavepoint runs fn in the caller's transaction tx under a savepoint,
// and rolls back to it when fn fails, or always with undo, so that what fn
// did is gone. It reports false, with the error, without running fn, when
// the transaction refuses a savepoint (PostgreSQL's after a failed
// statement).
func (s *Store) underSavepoint(ctx context.Context, tx Executor, undo bool, fn func() error) (bool, error) {
	m, err := s.MarkTx(ctx, tx)
	if err != nil {
		return false, err
	}
	err = fn()
	if err != nil || undo {
		if e := m.Undo(ctx); e != nil {
			return true, errors.Join(err, e)
		}
		return true, err
	}
	_ = m.Keep(ctx) // a savepoint left behind ends with the transaction
	return true, err
}

// insertAll inserts rows in batches and returns their ids in order.
func (s *Store) insertAll(ctx context.Context, ex Executor, rows []InsertRow) ([]int64, error) {
	ids := make([]int64, 0, len(rows))
	for start := 0; start < len(rows); {
		end := s.batchEnd(rows, start)
		got, err := s.insert(ctx, ex, rows[start:end])
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
		start = end
	}
	return ids, nil
}

// maxBatchBytes bounds the text one insert statement carries, well under
// the packet limits of every database; a server with a smaller cap
// (MySQL's max_allowed_packet) gets batches of at most MaxArgsBytes.
const maxBatchBytes = 4 << 20

// rowBytes counts a row's numbers and punctuation in an insert statement.
const rowBytes = 128

// batchEnd returns where the insert batch that begins at start ends: at
// most MaxInsertBatch rows and maxBatchBytes (or MaxArgsBytes, when the
// database's is smaller) of text, and at least one row.
func (s *Store) batchEnd(rows []InsertRow, start int) int {
	return s.batchEndBy(len(rows), start, func(i int) int {
		r := &rows[i]
		return len(r.Args) + len(r.Kind) + len(r.Queue) + len(r.RateKeys) + len(r.ConcKey) + len(r.LastError) + len(r.CoalesceKey) + len(r.Metadata) + len(r.FairKey)
	})
}

// batchEndBy returns where the batch of n rows that begins at start ends,
// by the bounds of batchEnd, given the bytes of text row i carries.
func (s *Store) batchEndBy(n, start int, text func(i int) int) int {
	limit := maxBatchBytes
	if m := MaxArgsBytes(s); m > 0 {
		limit = min(limit, m)
	}
	end, size := start, 0
	for end < n && end-start < s.q.c.MaxInsertBatch {
		size += text(end) + rowBytes
		if end > start && size > limit {
			break
		}
		end++
	}
	return end
}

func (s *Store) insertRow(j NewJob, now time.Time) (InsertRow, error) {
	if j.Kind == "" {
		return InsertRow{}, errors.New("kind is empty")
	}
	if j.Queue == "" {
		return InsertRow{}, errors.New("queue is empty")
	}
	if err := s.validate(j); err != nil {
		return InsertRow{}, err
	}
	for _, k := range j.RateKeys {
		if err := s.checkKey("rate-limit", k.Key); err != nil {
			return InsertRow{}, err
		}
	}
	if j.Conc != nil {
		if err := s.checkKey("concurrency", j.Conc.Key); err != nil {
			return InsertRow{}, err
		}
	}
	if j.Coalesce != nil {
		if err := s.checkKey("coalesce", j.Coalesce.Key); err != nil {
			return InsertRow{}, err
		}
	}
	for name, v := range map[string]string{"kind": j.Kind, "queue": j.Queue} {
		if max := s.q.c.MaxKeyLength; max > 0 && utf8.RuneCountInString(v) > max {
			return InsertRow{}, fmt.Errorf("%w: %s is %d characters; %s holds at most %d", ErrKeyTooLong, name, utf8.RuneCountInString(v), s.d.Name(), max)
		}
	}
	metadata, err := EncodeMetadata(j.Metadata)
	if err != nil {
		return InsertRow{}, err
	}
	created := Micros(now)
	runAt := created
	state := StateReady
	if !j.RunAt.IsZero() && j.RunAt.After(now) {
		runAt, state = MicrosNotBefore(j.RunAt), StateScheduled
	}
	row := InsertRow{
		Kind:        j.Kind,
		Queue:       j.Queue,
		Priority:    j.Priority,
		State:       state,
		Args:        string(j.Args),
		MaxAttempts: j.MaxAttempts,
		CreatedAt:   created,
		RunAt:       runAt,
		RateKeys:    EncodeRateKeys(j.RateKeys),
		Metadata:    metadata,
		FairKey:     j.FairKey,
	}
	if c := j.Conc; c != nil {
		row.ConcKey, row.ConcLimit, row.ConcDuration, row.ConcDiscard = c.Key, c.To, c.Duration.Microseconds(), c.Discard
	}
	return row, nil
}

// checkKey refuses a key the key columns cannot hold (see CheckKey).
func (s *Store) checkKey(what, key string) error {
	return CheckKey(what+" key", key)
}

func (s *Store) insert(ctx context.Context, ex Executor, rows []InsertRow) ([]int64, error) {
	q, args := s.q.InsertJobs(rows)
	if s.q.c.Returning {
		ids, err := queryInt64s(ctx, ex, q, args)
		if err != nil {
			return nil, err
		}
		if len(ids) != len(rows) {
			return nil, fmt.Errorf("inserted %d jobs but got %d ids back", len(rows), len(ids))
		}
		slices.Sort(ids)
		return ids, nil
	}
	res, err := exec(ctx, ex, q, args)
	if err != nil {
		return nil, err
	}
	step := int64(1)
	if st, ok := s.d.(IDStep); ok {
		step = st.IDStep()
	}
	ids := make([]int64, len(rows))
	for i := range ids {
		ids[i] = res.LastInsertID + int64(i)*step
	}
	return ids, nil
}
