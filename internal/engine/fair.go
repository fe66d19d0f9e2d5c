package engine

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
)

// FairScale is a job's cost in virtual time at weight 1: a job of weight w
// advances its key's virtual finish by FairScale/w. Weights 1 to
// MaxFairWeight keep every step at least 1, and a level's virtual time
// reaches the int64 limit only after 2^43 (8.8 trillion) jobs of weight 1.
const FairScale = 1 << 20

// MaxFairWeight is the largest weight a fairness key may have.
const MaxFairWeight = FairScale

// fairStep is the virtual time one job of weight w takes.
func fairStep(w int) int64 {
	if w < 1 {
		w = 1
	}
	return FairScale / int64(w)
}

// checkFair refuses a fairness key or weight the store cannot keep.
func checkFair(j NewJob) error {
	if j.FairKey == "" {
		if j.FairWeight != 0 {
			return fmt.Errorf("fairness weight %d without a fairness key", j.FairWeight)
		}
		return nil
	}
	if err := CheckKey("fairness key", j.FairKey); err != nil {
		return err
	}
	if j.FairWeight < 0 || j.FairWeight > MaxFairWeight {
		return fmt.Errorf("fairness weight %d for key %q is out of range: it must be between 1 and %d", j.FairWeight, j.FairKey, MaxFairWeight)
	}
	return nil
}

// fairLevel is a queue's priority level: fair order applies among its jobs,
// each level with a virtual time and key finishes of its own.
type fairLevel struct {
	queue    string
	priority int
}

// tagFair gives each fair row its virtual start time, in ex's transaction:
// per priority level of each queue (queues in name order, then levels in
// priority order), it locks the rows of the batch's keys (in key order),
// reads the level's virtual time, and starts each key's jobs, in the order
// given, at max(virtual time, the key's last finish at that level), one
// step of FairScale/weight apart. It returns what the keys' new finishes
// are computed from, for fairTags.saves to write once the enqueue knows
// which rows it kept (nil when no row is fair). Concurrent enqueues of one
// key and level wait for each other on its row. The keys' statements are
// split as job inserts are (keyRuns), in key order, so a batch of any
// number of keys fits a statement's parameters.
func (s *Store) tagFair(ctx context.Context, ex Executor, rows []InsertRow, weights []int) (*fairTags, error) {
	byLevel := map[fairLevel]map[string][]int{}
	for i := range rows {
		r := &rows[i]
		if r.FairKey == "" {
			continue
		}
		l := fairLevel{r.Queue, r.Priority}
		if byLevel[l] == nil {
			byLevel[l] = map[string][]int{}
		}
		byLevel[l][r.FairKey] = append(byLevel[l][r.FairKey], i)
	}
	if len(byLevel) == 0 {
		return nil, nil
	}
	levels := make([]fairLevel, 0, len(byLevel))
	for l := range byLevel {
		levels = append(levels, l)
	}
	slices.SortFunc(levels, compareLevels)
	t := &fairTags{weights: weights}
	for _, l := range levels {
		groups := byLevel[l]
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var inserts, locks []Stmt
		for run := range s.keyRuns(keys) {
			inserts = append(inserts, stmt(s.q.InsertFairKeys(l.queue, l.priority, run)))
			locks = append(locks, query(s.q.LockFairKeys(l.queue, l.priority, run)))
		}
		last := make(map[string]int64, len(keys))
		var vt int64
		stmts := append(append(inserts, locks...), query(s.q.FairVirtualTime(l.queue, l.priority)))
		err := pipeline(ctx, ex, stmts, func(i int, rs Rows) error {
			for rs.Next() {
				if i < len(stmts)-1 {
					var k string
					var f int64
					if err := rs.Scan(&k, &f); err != nil {
						return err
					}
					last[k] = f
				} else if err := rs.Scan(&vt); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("fairness keys of queue %s, priority %d: %w", l.queue, l.priority, err)
		}
		lt := fairLevelTags{fairLevel: l, keys: keys, rows: make([][]int, len(keys)), last: make([]int64, len(keys))}
		for n, k := range keys {
			f := max(vt, last[k])
			for _, i := range groups[k] {
				step := fairStep(weights[i])
				if f > math.MaxInt64-step {
					return nil, fmt.Errorf("fairness key %q of queue %s: its virtual time would overflow", k, l.queue)
				}
				rows[i].FairStart = f
				f += step
			}
			lt.rows[n], lt.last[n] = groups[k], last[k]
		}
		t.levels = append(t.levels, lt)
	}
	return t, nil
}

// compareLevels orders levels by queue, then priority: the order in which
// transactions lock the fairness keys of several levels.
func compareLevels(a, b fairLevel) int {
	return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.priority, b.priority))
}

// fairTags is what tagFair did, level by level: the keys it locked, and
// for each key the batch's rows in start order and the finish it had.
type fairTags struct {
	levels  []fairLevelTags
	weights []int
}

type fairLevelTags struct {
	fairLevel
	keys []string
	rows [][]int
	last []int64
}

// saves returns the statements that write the keys' new finishes: each
// key's finish becomes that of its last row the enqueue keeps, or stays
// as it was when it keeps none. A row dead says will never run (a
// concurrency limit's Discard cancelled it, or it is a coalescing call
// that joined a pending job instead of adding one): when it comes after
// the key's last kept row, the key is not charged for it, as if it had
// not been enqueued. One that comes before a kept row of its key keeps
// its step (docs/fairness.md, Approximations). The keys' rows are locked
// since tagFair, so the finishes are written with the enqueue's last
// statements, at no extra statement.
func (t *fairTags) saves(s *Store, rows []InsertRow, dead func(i int) bool) []Stmt {
	if t == nil {
		return nil
	}
	var writes []Stmt
	for _, l := range t.levels {
		finish := make([]int64, len(l.keys))
		for n := range l.keys {
			finish[n] = l.last[n]
			for _, i := range slices.Backward(l.rows[n]) {
				if !dead(i) {
					finish[n] = rows[i].FairStart + fairStep(t.weights[i])
					break
				}
			}
		}
		start := 0
		for run := range s.keyRuns(l.keys) {
			writes = append(writes, stmt(s.q.SaveFairKeys(l.queue, l.priority, run, finish[start:start+len(run)])))
			start += len(run)
		}
	}
	return writes
}

// keyRuns yields keys (fairness keys, semaphores, budgets) in the runs one
// statement binds, in order, by the bounds of a job insert (batchEnd): at
// most MaxInsertBatch keys, whose rows bind fewer parameters than a batch
// of jobs. It yields each run with whether it is the last, and one empty
// run for no keys.
func (s *Store) keyRuns(keys []string) iter.Seq2[[]string, bool] {
	return func(yield func([]string, bool) bool) {
		for start := 0; ; {
			end := s.batchEndBy(len(keys), start, func(i int) int { return len(keys[i]) })
			if !yield(keys[start:end], end == len(keys)) || end == len(keys) {
				return
			}
			start = end
		}
	}
}

// PruneFairKeys deletes the fairness keys whose last finish is behind both
// the virtual time of their queue's priority level and the start of each
// of its waiting fair jobs (FairPruneBound): such a key has no job ready
// or waiting (its finish is past its jobs' starts), and its next job of
// that priority starts at the virtual time whether its row is there or
// not, so this changes no start time — while the virtual time does not go
// back below the bound, which only a job that was running can make it
// do, coming back with its old start (a retry, a snooze, a release; by
// less than its level's backlog). It returns how many it deleted.
//
// Each level is pruned pruneBatch keys at a time, a transaction each,
// which first locks the keys behind the bound without waiting (a key
// another transaction holds is being enqueued to, and is kept), and only
// then reads the bound again, in one statement, and deletes those of its
// keys still behind it. Read after the locks, the bound sees every job
// enqueued to them (an enqueue holds its keys' rows until it commits);
// read in one statement, on one snapshot, it sees every job that moves
// between ready and waiting meanwhile (a promotion, an unpark, a slot
// handed to a blocked job, a claim's deferral) on one side or the other.
// (Two statements, each on a snapshot of its own at READ COMMITTED,
// missed a delayed job promoted between them.)
func (s *Store) PruneFairKeys(ctx context.Context) (int, error) {
	var levels []fairLevel
	rows, err := s.db.Query(ctx, s.q.FairLevels())
	if err == nil {
		for rows.Next() {
			var l fairLevel
			if err = rows.Scan(&l.queue, &l.priority); err != nil {
				break
			}
			levels = append(levels, l)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	if err != nil {
		return 0, s.wrap(fmt.Errorf("prune fairness keys: %w", err))
	}
	deleted := 0
	for _, l := range levels {
		n, err := s.pruneFairLevel(ctx, l)
		deleted += n
		if err != nil {
			return deleted, s.wrap(fmt.Errorf("prune fairness keys of queue %s, priority %d: %w", l.queue, l.priority, err))
		}
	}
	return deleted, nil
}

// pruneBatch is how many keys of a level one transaction of PruneFairKeys
// locks.
const pruneBatch = 500

// pruneFairLevel is PruneFairKeys for one level.
func (s *Store) pruneFairLevel(ctx context.Context, l fairLevel) (int, error) {
	after := ""
	return inBatches(ctx, pruneBatch, 0, func(limit int) (found, deleted int, err error) {
		var last string
		err = s.inTx(ctx, func(tx Tx) error {
			// Counted per attempt: a retried transaction's count starts over.
			found, deleted, last = 0, 0, ""
			before, err := s.fairPruneBound(ctx, tx, l)
			if err != nil {
				return err
			}
			q, args := s.q.LockPrunableFairKeys(l.queue, l.priority, after, before, limit)
			keys, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(keys) == 0 {
				return err
			}
			found, last = len(keys), keys[len(keys)-1]
			// Again, now that the keys are held: a job enqueued to one of
			// them committed before this read, which counts it.
			if before, err = s.fairPruneBound(ctx, tx, l); err != nil {
				return err
			}
			q, args = s.q.DeleteFairKeys(l.queue, l.priority, keys, before)
			res, err := exec(ctx, tx, q, args)
			if err != nil {
				return err
			}
			deleted = int(res.RowsAffected)
			return nil
		})
		// The next batch starts after this one's last key, past the keys
		// skipped or kept.
		after = last
		return found, deleted, err
	})
}

// fairPruneBound reads what PruneFairKeys deletes a level's keys below:
// the lower of its virtual time and the lowest start of its waiting fair
// jobs, in one statement.
func (s *Store) fairPruneBound(ctx context.Context, ex Executor, l fairLevel) (int64, error) {
	q, args := s.q.FairPruneBound(l.queue, l.priority)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var vt int64
	var waiting nullInt64
	for rows.Next() {
		if err := rows.Scan(&vt, &waiting); err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if waiting.Valid {
		return min(vt, waiting.Int64), nil
	}
	return vt, nil
}
