package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// FairScale is a job's cost in virtual time at weight 1: a job of weight w
// advances its key's virtual finish by FairScale/w. Weights 1 to
// MaxFairWeight keep every step at least 1, and a queue's virtual time
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

// tagFair gives each fair row its virtual start time, in ex's transaction:
// per queue, it locks the rows of the batch's keys (in key order, queues
// in name order), reads the queue's virtual time, and starts each key's
// jobs, in the order given, at max(virtual time, the key's last finish),
// one step of FairScale/weight apart; then it saves each key's new finish.
// Concurrent enqueues of one key wait for each other on its row.
func (s *Store) tagFair(ctx context.Context, ex Executor, rows []InsertRow, weights []int) error {
	byQueue := map[string]map[string][]int{}
	for i := range rows {
		r := &rows[i]
		if r.FairKey == "" {
			continue
		}
		if byQueue[r.Queue] == nil {
			byQueue[r.Queue] = map[string][]int{}
		}
		byQueue[r.Queue][r.FairKey] = append(byQueue[r.Queue][r.FairKey], i)
	}
	if len(byQueue) == 0 {
		return nil
	}
	queues := make([]string, 0, len(byQueue))
	for q := range byQueue {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	var writes []Stmt
	for _, queue := range queues {
		groups := byQueue[queue]
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		last := make(map[string]int64, len(keys))
		var vt int64
		err := pipeline(ctx, ex, []Stmt{
			stmt(s.q.InsertFairKeys(queue, keys)),
			query(s.q.LockFairKeys(queue, keys)),
			query(s.q.FairVirtualTime(queue)),
		}, func(i int, rs Rows) error {
			for rs.Next() {
				if i == 1 {
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
			return fmt.Errorf("fairness keys of queue %s: %w", queue, err)
		}
		finish := make([]int64, len(keys))
		for n, k := range keys {
			f := max(vt, last[k])
			for _, i := range groups[k] {
				step := fairStep(weights[i])
				if f > math.MaxInt64-step {
					return fmt.Errorf("fairness key %q of queue %s: its virtual time would overflow", k, queue)
				}
				rows[i].FairStart = f
				f += step
			}
			finish[n] = f
		}
		writes = append(writes, stmt(s.q.SaveFairKeys(queue, keys, finish)))
	}
	if err := pipeline(ctx, ex, writes, nil); err != nil {
		return fmt.Errorf("save fairness keys: %w", err)
	}
	return nil
}

// PruneFairKeys deletes the fairness keys whose last finish is behind
// their queue's virtual time: such a key's next job starts at the virtual
// time whether its row is there or not, so this changes no start time
// (while the virtual time does not go back, which only a retried job with
// an old start can make it do, by less than its queue's backlog). It
// returns how many it deleted.
func (s *Store) PruneFairKeys(ctx context.Context) (int, error) {
	queues, err := queryColumn[string](ctx, s.db, s.q.FairQueues(), nil)
	if err != nil {
		return 0, s.wrap(fmt.Errorf("prune fairness keys: %w", err))
	}
	deleted := 0
	for _, queue := range queues {
		err := s.inTx(ctx, func(tx Tx) error {
			q, args := s.q.FairVirtualTime(queue)
			vts, err := queryInt64s(ctx, tx, q, args)
			if err != nil || len(vts) == 0 {
				return err
			}
			q, args = s.q.DeleteFairKeys(queue, vts[0])
			res, err := exec(ctx, tx, q, args)
			if err != nil {
				return err
			}
			deleted += int(res.RowsAffected)
			return nil
		})
		if err != nil {
			return deleted, s.wrap(fmt.Errorf("prune fairness keys of queue %s: %w", queue, err))
		}
	}
	return deleted, nil
}
