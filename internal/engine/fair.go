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
