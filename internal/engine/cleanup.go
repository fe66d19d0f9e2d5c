package engine

import (
	"context"
	"fmt"
	"time"
)

// DeleteFinished deletes, batch at a time, completed and cancelled jobs
// that finished before the given time, with the calls they collected, and
// returns how many it deleted. Failed jobs are kept until retried or
// cancelled.
func (s *Store) DeleteFinished(ctx context.Context, before time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = 500
	}
	total := 0
	for {
		var n int
		err := s.inTx(ctx, func(tx Tx) error {
			n = 0 // an attempt run again counts anew
			q, args := s.q.LockFinished(Micros(before), batch)
			rows, err := tx.Query(ctx, q, args...)
			if err != nil {
				return err
			}
			var ids, withCalls []int64
			for rows.Next() {
				var id int64
				var calls int
				if err := rows.Scan(&id, &calls); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
				if calls > 1 {
					withCalls = append(withCalls, id)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(ids) == 0 {
				return err
			}
			var writes []Stmt
			if len(withCalls) > 0 {
				writes = append(writes, stmt(s.q.DeleteCalls(withCalls)))
			}
			writes = append(writes, stmt(s.q.DeleteAttempts(ids)))
			n = len(ids)
			return pipeline(ctx, tx, append(writes, stmt(s.q.DeleteJobsByID(ids))), nil)
		})
		if err != nil {
			return total, s.wrap(fmt.Errorf("delete finished jobs: %w", err))
		}
		total += n
		if n < batch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
