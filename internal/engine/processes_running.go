package engine

import (
	"context"
	"fmt"
	"time"
)

// RunningCounter is implemented by dialects that count running jobs per
// process through an index (each dialect its own way).
type RunningCounter interface {
	// RunningPerProcess returns rows of (process_id, count) for the
	// running jobs.
	RunningPerProcess() string
}

// ProcessInfo is a registered process as an operator sees it.
type ProcessInfo struct {
	ProcessRow
	// Age is how long ago its last heartbeat was, on the clock the
	// heartbeats were stamped on.
	Age time.Duration
	// Running counts the jobs it is running.
	Running int
}

// Now returns the time c decides at: the database's clock (read through
// the pool) with DatabaseTime, else the caller's.
func (s *Store) Now(ctx context.Context, c Clock) (time.Time, error) {
	t, err := s.now(ctx, s.db, c)
	return t, s.wrap(err)
}

// Processes lists the registered workers and dispatchers with the age of
// their heartbeats (measured on c, which should be the clock they stamp
// on: DatabaseTime unless they run with a host clock) and how many jobs
// each runs.
func (s *Store) Processes(ctx context.Context, c Clock) ([]ProcessInfo, error) {
	rows, err := s.ListProcesses(ctx)
	if err != nil {
		return nil, err
	}
	now, err := s.Now(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	running := map[int64]int{}
	if rc, ok := s.d.(RunningCounter); ok {
		r, err := s.db.Query(ctx, rc.RunningPerProcess())
		if err != nil {
			return nil, s.wrap(fmt.Errorf("count running jobs: %w", err))
		}
		defer r.Close()
		for r.Next() {
			var id nullInt64
			var n int
			if err := r.Scan(&id, &n); err != nil {
				return nil, err
			}
			running[id.Int64] += n
		}
		if err := r.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]ProcessInfo, len(rows))
	for i, p := range rows {
		out[i] = ProcessInfo{ProcessRow: p, Age: now.Sub(FromMicros(p.HeartbeatAt)), Running: running[p.ID]}
	}
	return out, nil
}
