package engine

import (
	"context"
	"fmt"
	"time"
)

// Attempt is one failed run of a job, as kept with it.
type Attempt struct {
	// Attempt is the run's number, 1 for the first.
	Attempt int
	// Error is the run's error, with its stack when it panicked.
	Error string
	// FailedAt is when its failure was recorded.
	FailedAt time.Time
}

// Attempts returns the failed runs kept for job id, oldest first. A run
// that completed, or was given back (a release, an upstream 429), has
// none; a run lost with its process (ReapDeadProcesses) is a failed one,
// with LostError.
func (s *Store) Attempts(ctx context.Context, id int64) ([]Attempt, error) {
	q, args := s.q.LoadAttempts(id)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap(fmt.Errorf("attempts of job %d: %w", id, err))
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		var at int64
		if err := rows.Scan(&a.Attempt, &a.Error, &at); err != nil {
			return nil, fmt.Errorf("attempts of job %d: %w", id, err)
		}
		a.FailedAt = FromMicros(at)
		out = append(out, a)
	}
	return out, rows.Err()
}
