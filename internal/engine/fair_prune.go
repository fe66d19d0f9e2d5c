package engine

import (
	"context"
	"fmt"
	"math"
)

// PruneFairKeys deletes the fairness keys whose rows no longer change a
// start: it returns how many it deleted. A key's next job of a priority
// starts at max(its level's virtual time, its finish there), so a key with
// no job ready or waiting whose finish is at most the virtual time starts
// the same whether its row is there or not. But the virtual time is read
// from the rows too, with none of the level's fair jobs ready: the latest
// finish of the level's keys, and the latest of those with no job waiting
// among the fairServedKeys keys with the latest finishes (VirtualTimeOfLevel).
// So of the keys with no job waiting whose finish is at most the virtual
// time (fairBound.prunable), it deletes those outside the keys the virtual
// time looks at (behind the finish of the last of them), and those no
// later than the lowest start of the level's waiting fair jobs, which
// raise no virtual time, but for the level's latest key, which the
// virtual time is read from: a level gone idle keeps that one row. This
// changes no virtual time, and no start while the virtual time does not
// go back below a deleted key's finish, which only an old start or a
// refund can make it do: that of a job that was running and comes back (a
// retry, a snooze, a release), or that of a job that waited since before
// the key ran, once it is ready again or while each of the fairServedKeys
// latest keys has a job waiting; or a cancel's refund (RefundFairKeys)
// that takes one of the keys the virtual time looks at back below the
// deleted key's finish. A key deleted meanwhile starts there, as a new
// key does, not at its old finish (docs/fairness.md, Pruning).
//
// A key whose job waits (delayed, deferred or parked by a rate limit,
// blocked on a concurrency slot) keeps its row: when the job is ready, its
// old start may take the virtual time below the key's finish, which the
// key's next job must still start after.
//
// Each level is pruned pruneBatch keys at a time, a transaction each,
// which first locks the level's latest key that no one holds (the anchor,
// kept), then the keys it may delete without waiting (a key another
// transaction holds is being enqueued to, and is kept), and only then
// reads the bound again, with each of its keys' finish and waiting jobs,
// in one statement, and deletes those of its keys still prunable. Read
// after the locks, it sees every job enqueued to them (an enqueue holds
// its keys' rows until it commits); read in one statement, on one
// snapshot, it sees every job that moves between ready and waiting
// meanwhile (a promotion, an unpark, a slot handed to a blocked job, a
// claim's deferral) on one side or the other. (Two statements, each on a
// snapshot of its own at READ COMMITTED, missed a delayed job promoted
// between them.) The anchor, held until the batch commits, is not
// deleted by another prune, nor its finish lowered by a cancel's refund,
// meanwhile: it keeps the level's latest finish as late as the keys the
// batch deletes.
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
			var b fairBound
			anchor, err := s.lockFairAnchor(ctx, tx, l, &b)
			if err != nil {
				return err
			}
			if err := s.readFairBound(ctx, tx, l, &b); err != nil {
				return err
			}
			through, ok := b.through()
			if !ok {
				return nil
			}
			q, args := s.q.LockPrunableFairKeys(l.queue, l.priority, after, through, anchor, limit)
			keys, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(keys) == 0 {
				return err
			}
			found, last = len(keys), keys[len(keys)-1]
			// Again, now that the keys are held: a job enqueued to one of
			// them committed before this read, which counts it.
			prune, err := s.prunableFairKeys(ctx, tx, l, keys, b)
			if err != nil || len(prune) == 0 {
				return err
			}
			q, args = s.q.DeleteFairKeys(l.queue, l.priority, prune)
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

// fairBound is what PruneFairKeys weighs a level's keys against.
type fairBound struct {
	// vt is the level's virtual time.
	vt int64
	// waiting is the lowest start of the level's waiting fair jobs.
	waiting nullInt64
	// served is the finish of the last of the keys the virtual time looks
	// at (fairServedKeys, latest finish first); NULL with fewer keys.
	served nullInt64
	// anchor is the finish of the level's latest key that the transaction
	// holds and keeps; NULL when it holds none.
	anchor nullInt64
}

// prunable reports whether a key whose finish is f, with a job waiting or
// not, may be deleted: with no job waiting and f at most the virtual time
// (so none ready either: a ready job's start is before its key's finish,
// and the virtual time no later than it), when f is before the finish of
// the last key the virtual time looks at (no read of it sees the key while
// the keys it looks at move only later, as all but a cancel's refund move
// them: RefundFairKeys takes a key's finish back to the start of its
// earliest cancelled job, and when that is below f the virtual time is
// read as if the deleted key had never run, lower than with its row), or
// when f is no later than the
// lowest waiting start and the anchor's finish (the virtual time, read
// without the key, stays no lower than both).
func (b fairBound) prunable(f int64, waiting bool) bool {
	if waiting || f > b.vt {
		return false
	}
	if b.served.Valid && f < b.served.Int64 {
		return true
	}
	return b.anchor.Valid && f <= b.anchor.Int64 && (!b.waiting.Valid || f <= b.waiting.Int64)
}

// through returns the latest finish prunable accepts, or false when it
// accepts none.
func (b fairBound) through() (int64, bool) {
	t, ok := int64(math.MinInt64), false
	if b.served.Valid && b.served.Int64 > math.MinInt64 {
		t, ok = b.served.Int64-1, true
	}
	if b.anchor.Valid {
		a := b.anchor.Int64
		if b.waiting.Valid {
			a = min(a, b.waiting.Int64)
		}
		t, ok = max(t, a), true
	}
	return min(t, b.vt), ok
}

// lockFairAnchor locks the level's latest key that no other transaction
// holds, sets b.anchor to its finish and returns it; "" when it locks
// none.
func (s *Store) lockFairAnchor(ctx context.Context, ex Executor, l fairLevel, b *fairBound) (string, error) {
	q, args := s.q.LockFairAnchor(l.queue, l.priority)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	key := ""
	b.anchor = nullInt64{}
	for rows.Next() {
		if err := rows.Scan(&key, &b.anchor); err != nil {
			return "", err
		}
	}
	return key, rows.Err()
}

// readFairBound reads the level's virtual time, lowest waiting start and
// served finish into b, in one statement.
func (s *Store) readFairBound(ctx context.Context, ex Executor, l fairLevel, b *fairBound) error {
	q, args := s.q.FairPruneBound(l.queue, l.priority)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&b.vt, &b.waiting, &b.served); err != nil {
			return err
		}
	}
	return rows.Err()
}

// prunableFairKeys reads the bound again with keys (locked), their
// finishes and whether a job of each waits, in one statement, and returns
// those of keys that b, so updated, finds prunable.
func (s *Store) prunableFairKeys(ctx context.Context, ex Executor, l fairLevel, keys []string, b fairBound) ([]string, error) {
	q, args := s.q.ReadPrunableFairKeys(l.queue, l.priority, keys)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type key struct {
		name    string
		finish  int64
		waiting int
	}
	var read []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&b.vt, &b.waiting, &b.served, &k.name, &k.finish, &k.waiting); err != nil {
			return nil, err
		}
		read = append(read, k)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []string
	for _, k := range read {
		if b.prunable(k.finish, k.waiting != 0) {
			out = append(out, k.name)
		}
	}
	return out, nil
}
