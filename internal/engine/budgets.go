package engine

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

type (
	nullString = sql.NullString
	nullInt64  = sql.NullInt64
)

// budget is one locked budget row during a claim or an unpark.
type budget struct {
	row   BudgetRow
	state ratelimit.State
	// prepared is set once the row's debt has been capped for the limit
	// this claim applies.
	prepared bool
	dirty    bool
	// cover is the limit to record when prepare's conversion left the
	// budget owing more intervals than the new limit's burst: the new
	// limit, its burst raised to cover them (ratelimit.Params.Covering),
	// so that the next conversion counts them as admissions. wait is set
	// when the debt holds an upstream's wait instead (CarryDebt, Hold),
	// which records the limit as it is.
	cover *ratelimit.Params
	wait  bool
	// parkedNow is set when this transaction parked jobs on the budget.
	parkedNow bool
	// displaced are the jobs this transaction moved out of their slots for
	// more urgent ones (takeSlot).
	displaced []int64
	// taken are the priorities of the jobs this claim admitted without a
	// slot on the budget while it had slots handed out ahead.
	taken []int
	// comeback is the earliest time the next job deferred back to its own
	// slot in this claim may be told to return: one cost after the last
	// (nanoseconds; 0 before the first).
	comeback int64
}

// loaded returns the budget of a row read from the database.
func loaded(r BudgetRow) *budget {
	return &budget{row: r, state: ratelimit.State{TAT: r.TAT, NextSlot: r.NextSlot}}
}

// params returns the limit the row was last charged under.
func (b *budget) params() ratelimit.Params { return b.row.Params() }

// prepare applies the rules for a changed limit, once per claim, and
// records the limit the row is now charged under. now and until (the
// horizon: the latest slot a transaction hands out) are in nanoseconds.
//
// A looser limit counts the debt the budget inherits again in its own
// intervals (ratelimit.CarryDebt) and brings a slot cursor that lies past
// until back to it. Slots are handed
// out at most a horizon ahead, and time only moves on, so no job holds a
// slot past until: what lies beyond was put there by parking jobs under
// the old limit, whose slots would now come sooner. The parked jobs then
// get slots from until on, at the new pace. (A claim that unparks looks a
// tenth of a horizon further: a job it slotted there may find its slot
// taken and wait again, as any job may, a slot being a hint.)
func (b *budget) prepare(p ratelimit.Params, now, until int64) {
	if b.prepared {
		return
	}
	b.prepared = true
	prev := b.params()
	if prev == p {
		return
	}
	b.wait = p.CarryDebt(&b.state, now, prev)
	if c := p.Covering(b.state, now); !b.wait && c != p {
		b.cover = &c
	}
	if p.Loosens(prev) && b.state.NextSlot > until {
		b.state.NextSlot = until
	}
	b.row.IntervalNS, b.row.Burst = storedLimit(p)
	b.dirty = true
}

// save returns the row to write, stamped at now (µs), or at its last
// stamp if that is later (a claim on a snapshot may decide at an earlier
// time than the claim that charged the budget last: snapshot.go).
func (b *budget) save(now int64) BudgetRow {
	b.row.TAT, b.row.NextSlot, b.row.UpdatedAt = b.state.TAT, b.state.NextSlot, max(b.row.UpdatedAt, now)
	if b.cover != nil && !b.wait {
		b.row.IntervalNS, b.row.Burst = storedLimit(*b.cover)
	}
	return b.row
}

// loadBudget reads one budget row into budgets, by name.
func loadBudget(rows Rows, budgets map[string]*budget) error {
	r, err := scanBudget(rows)
	if err == nil {
		budgets[r.Name] = loaded(r)
	}
	return err
}

func scanBudget(rows Rows, extra ...any) (BudgetRow, error) {
	var r BudgetRow
	dest := append([]any{&r.Name, &r.TAT, &r.NextSlot, &r.IntervalNS, &r.Burst, &r.Parked, &r.UpdatedAt, &r.SlottedPriority}, extra...)
	if err := rows.Scan(dest...); err != nil {
		return r, fmt.Errorf("read budget: %w", err)
	}
	return r, nil
}

func queryBudgets(ctx context.Context, ex Executor, q string, args []any) ([]BudgetRow, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BudgetRow
	for rows.Next() {
		r, err := scanBudget(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// lockBudgets locks the budget rows of keys (sorted), creating the missing
// ones, and then reads the time the claim decides at: the database's clock
// when c asks for it and the database has one, else the caller's. The time
// is read after the last lock is taken; where the database can, in the
// same round trip. A row that is still missing (cleared as idle in
// between) reads as the empty state, which admits exactly as the cleared
// row did.
func (s *Store) lockBudgets(ctx context.Context, tx Executor, keys []string, c Clock) (map[string]*budget, time.Time, error) {
	out, at, err := s.lockBudgetRows(ctx, tx, keys, c, s.q.LockBudgets, s.q.InsertBudgets, "")
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock budgets: %w", err)
	}
	for _, k := range keys {
		if out[k] == nil {
			out[k] = &budget{row: BudgetRow{Name: k}, dirty: true}
		}
	}
	return out, at, nil
}

// lockFreeBudgets locks the budget rows of keys (sorted) that no other
// transaction holds, without waiting for those, and then reads the time as
// lockBudgets does. A claim completes its BudgetHint with them out of key
// order: it waits for none of them, so it cannot deadlock, and it then
// holds exactly the rows it would have held had it locked them all in
// order. It reports errHintMissed when a row is held or does not exist.
func (s *Store) lockFreeBudgets(ctx context.Context, tx Executor, keys []string, c Clock) (map[string]*budget, time.Time, error) {
	out, at, err := s.lockBudgetRows(ctx, tx, keys, c, s.q.LockFreeBudgets, nil, "")
	switch {
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("lock free budgets: %w", err)
	case len(out) < len(keys):
		return nil, time.Time{}, errHintMissed
	}
	return out, at, nil
}

// lockBudgetRows locks the budget rows of keys with lock, inserting the
// missing ones with insert unless it is nil (lockByName), and reads the
// time after the last lock. Rows still missing are left out. holding is
// the greatest key of the budgets the transaction already holds ("" for
// none): where rows are locked one by one, a missing row that sorts before
// it, or before a row this call locked, is not inserted here but reported
// as missingBudgets (see there).
func (s *Store) lockBudgetRows(ctx context.Context, tx Executor, keys []string, c Clock, lock, insert func([]string) (string, []any), holding string) (map[string]*budget, time.Time, error) {
	out := make(map[string]*budget, len(keys))
	var after []Stmt
	if s.readsDatabase(c) {
		after = append(after, query(s.d.Now(), nil))
	}
	var inOrder func(missing []string) error
	if insert != nil && s.d.Capabilities().RowLocks {
		inOrder = func(missing []string) error {
			if missing[0] < max(holding, lastKey(out)) {
				return missingBudgets(missing)
			}
			return nil
		}
	}
	var dbNow int64
	err := s.lockByName(ctx, tx, keys, lock, insert, inOrder, after,
		func(k string) bool { return out[k] != nil },
		func(rows Rows) error { return loadBudget(rows, out) },
		func(_ int, rows Rows) error { return rows.Scan(&dbNow) })
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(after) > 0 {
		return out, FromMicros(dbNow), nil
	}
	return out, c.Host(), nil
}

// lockByName locks rows by name, in sorted order: it runs lock(keys) and
// then the after statements, in one round trip where the database can.
// For keys that found says are still missing, it runs insert(missing),
// lock(missing) and the after statements again, so that after always runs
// after the last lock; with a nil insert it leaves them missing, and when
// inOrder (if not nil) refuses the insert it returns inOrder's error.
// scan reads each locked row; scanAfter each row of an after statement,
// told which (its index in after).
// More keys than a statement binds (keyRuns: an EnqueueMany of 40,000
// concurrency keys passed SQLite's 32,766 parameters) go in sorted runs,
// the after statements with the last.
func (s *Store) lockByName(ctx context.Context, tx Executor, keys []string, lock, insert func([]string) (string, []any),
	inOrder func(missing []string) error, after []Stmt, found func(string) bool, scan func(Rows) error, scanAfter func(int, Rows) error) error {
	for run, last := range s.keyRuns(keys) {
		var then []Stmt
		if last {
			then = after
		}
		if err := s.lockRun(ctx, tx, run, lock, insert, inOrder, then, found, scan, scanAfter); err != nil {
			return err
		}
	}
	return nil
}

// lockRun is lockByName for keys one statement binds.
func (s *Store) lockRun(ctx context.Context, tx Executor, keys []string, lock, insert func([]string) (string, []any),
	inOrder func(missing []string) error, after []Stmt, found func(string) bool, scan func(Rows) error, scanAfter func(int, Rows) error) error {
	if err := pipeline(ctx, tx, append([]Stmt{query(lock(keys))}, after...), readLocked(0, scan, scanAfter)); err != nil {
		return err
	}
	var missing []string
	for _, k := range keys {
		if !found(k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 || insert == nil {
		return nil
	}
	if inOrder != nil {
		if err := inOrder(missing); err != nil {
			return err
		}
	}
	stmts := append([]Stmt{stmt(insert(missing)), query(lock(missing))}, after...)
	return pipeline(ctx, tx, stmts, readLocked(1, scan, scanAfter))
}

// readLocked reads a pipeline's rows: those of statement first with scan,
// those of the statements after it (the clock, the paused queues) with
// scanAfter, told which of them (0 for the first after it).
func readLocked(first int, scan func(Rows) error, scanAfter func(int, Rows) error) func(i int, rows Rows) error {
	return func(i int, rows Rows) error {
		each := scan
		if i != first {
			each = func(rows Rows) error { return scanAfter(i-first-1, rows) }
		}
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return nil
	}
}

// saveBudgets returns the statements that write the changed budgets back,
// in key order, stamped at now (µs): one for each MaxInsertBatch of them
// (a save binds eight values a budget, and SQLite at most 32,766 in one
// statement: a claim of 4,096 jobs of as many budgets failed there as
// one), none when none changed.
func (s *Store) saveBudgets(budgets map[string]*budget, now int64) []Stmt {
	var rows []BudgetRow
	for _, b := range budgets {
		if b.dirty {
			rows = append(rows, b.save(now))
		}
	}
	slices.SortFunc(rows, func(a, b BudgetRow) int { return strings.Compare(a.Name, b.Name) })
	var out []Stmt
	for run := range slices.Chunk(rows, s.q.c.MaxInsertBatch) {
		out = append(out, stmt(s.q.SaveBudgets(run)))
	}
	return out
}

// BudgetInfo is a budget and the jobs waiting on it.
type BudgetInfo struct {
	BudgetRow
	// Waiting counts scheduled and parked jobs held by this budget.
	Waiting int
}

// NextAdmission is when the budget next admits a cost-1 job, as of now;
// zero for a paused budget, and for one that admits nothing again (held
// back past what its times reach, ratelimit.Never).
func (b BudgetInfo) NextAdmission(now time.Time) time.Time {
	p := b.Params()
	if p.Paused {
		return time.Time{}
	}
	_, at := p.Check(ratelimit.State{TAT: b.TAT, NextSlot: b.NextSlot}, Nanos(now), 1)
	if at == ratelimit.Never {
		return time.Time{}
	}
	return FromNanos(max(at, Nanos(now)))
}

// storedLimit is how a budget row records the limit p, as Params reads
// it back: its interval, and its burst, 0 for a paused limit.
func storedLimit(p ratelimit.Params) (interval int64, burst int) {
	if p.Paused {
		return p.Interval, 0
	}
	return p.Interval, p.Burst
}

// Params returns the limit the budget was last charged under.
func (r BudgetRow) Params() ratelimit.Params {
	return ratelimit.Params{
		Interval: r.IntervalNS,
		Burst:    r.Burst,
		Paused:   r.IntervalNS > 0 && r.Burst == 0,
	}
}

// ClearIdleBudgets deletes, batchSize at a time with a pause between
// batches, the budgets that admit exactly as a missing row would
// (ratelimit.Idle, with no job parked on them). Rows a claim holds locked
// are skipped. Each batch decides on c's time, read in its own
// transaction. It returns how many it deleted.
func (s *Store) ClearIdleBudgets(ctx context.Context, c Clock, batchSize int, pause time.Duration) (int, error) {
	return inBatches(ctx, batchSize, pause, func(limit int) (found, deleted int, err error) {
		err = s.inTx(ctx, func(tx Tx) error {
			found, deleted = 0, 0
			at, err := s.now(ctx, tx, c)
			if err != nil {
				return err
			}
			// Past the budgets' times every budget looks idle: with any,
			// nothing is decided.
			now := Nanos(at)
			q, args := s.q.LockIdleBudgets(now, limit)
			rows, err := queryBudgets(ctx, tx, q, args)
			if err != nil {
				return err
			}
			if _, err := budgetNow(at); err != nil && len(rows) > 0 {
				return err
			}
			found = len(rows)
			var idle []string
			for _, r := range rows {
				if r.Parked == 0 && ratelimit.Idle(ratelimit.State{TAT: r.TAT, NextSlot: r.NextSlot}, now) {
					idle = append(idle, r.Name)
				}
			}
			if len(idle) == 0 {
				return nil
			}
			q, args = s.q.DeleteBudgets(idle)
			if _, err = exec(ctx, tx, q, args); err != nil {
				return err
			}
			deleted = len(idle)
			return nil
		})
		if err != nil {
			return 0, 0, s.wrap(fmt.Errorf("clear idle budgets: %w", err))
		}
		return found, deleted, nil
	})
}

// missingBudgets are budget rows a transaction needs and may not create
// itself, where rows are locked one by one: each sorts before a budget it
// already holds. Inserting one could wait for another transaction that is
// inserting it too and waits, in key order, for a budget this one holds: a
// deadlock, which PostgreSQL breaks only after a second. inTx instead
// creates them on their own, committed at once, holding nothing, and runs
// the transaction again, which then finds them and locks every budget in
// key order.
type missingBudgets []string

func (m missingBudgets) Error() string {
	return fmt.Sprintf("budgets %s have no row yet", strings.Join(m, ", "))
}

// lastKey returns the greatest key of budgets, or "" when there is none.
func lastKey(budgets map[string]*budget) string {
	last := ""
	for k := range budgets {
		last = max(last, k)
	}
	return last
}

// createBudgets creates the empty rows of budgets a transaction reported
// missing, in a statement of their own.
func (s *Store) createBudgets(ctx context.Context, m missingBudgets) error {
	q, args := s.q.InsertBudgets(m)
	if _, err := exec(ctx, s.db, q, args); err != nil {
		return fmt.Errorf("create budgets: %w", err)
	}
	return nil
}
