package engine

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// revertCheck refuses, before anything of it runs, a revert of migration m
// that what the database holds would make fail: the error says what
// stands in the way and what to do. It reads through ex, under the
// migration lock.
type revertCheck func(ctx context.Context, s *Store, ex Executor, m Migration) error

// revertChecks are the checks run before reverting a migration, by
// version. Each reads with a statement of the catalog, which a database
// that cannot hold what it looks for finds nothing with.
var revertChecks = map[int]revertCheck{
	20: coalesceKeysHeldOnce,
}

// checkRevert runs m's revert check, if it has one.
func (s *Store) checkRevert(ctx context.Context, ex Executor, m Migration) error {
	check := revertChecks[m.Version]
	if check == nil {
		return nil
	}
	return check(ctx, s, ex, m)
}

// heldTwiceShown is how many rows (jobs) of coalesce keys held twice a
// refused revert of 020 names at most.
const heldTwiceShown = 12

// coalesceKeysHeldOnce refuses to revert 020 while two jobs hold one
// coalesce key: the revert makes MySQL's coalesce index unique again,
// which would fail on them (an enqueuer of the version before 020 may
// make them while a deploy rolls). It names the keys and their jobs.
func coalesceKeysHeldOnce(ctx context.Context, s *Store, ex Executor, m Migration) error {
	q, args := s.q.CoalesceKeysHeldTwice(heldTwiceShown + 1)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("revert migration %03d_%s: look for coalesce keys held by two jobs: %w", m.Version, m.Name, err)
	}
	defer rows.Close()
	var keys []string
	jobs := map[string][]string{}
	n := 0
	for rows.Next() {
		var key sql.NullString
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			return fmt.Errorf("revert migration %03d_%s: read coalesce keys held by two jobs: %w", m.Version, m.Name, err)
		}
		if n++; n > heldTwiceShown {
			break
		}
		if jobs[key.String] == nil {
			keys = append(keys, key.String)
		}
		jobs[key.String] = append(jobs[key.String], fmt.Sprint(id))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("revert migration %03d_%s: read coalesce keys held by two jobs: %w", m.Version, m.Name, err)
	}
	if len(keys) == 0 {
		return nil
	}
	held := make([]string, len(keys))
	for i, k := range keys {
		held[i] = fmt.Sprintf("%q (jobs %s)", k, strings.Join(jobs[k], ", "))
	}
	more := ""
	if n > heldTwiceShown {
		more = ", and more"
	}
	return fmt.Errorf("revert migration %03d_%s: more than one job holds %s %s%s, which the revert's unique coalesce index refuses "+
		"(enqueuers of the version before %03d may make such jobs while a deploy rolls): cancel all but one of each key's jobs "+
		"(`sluice cancel ID...`, or from the dashboard), then revert again; %03d stays applied",
		m.Version, m.Name, plural(len(keys), "coalesce key", "coalesce keys"), strings.Join(held, ", "), more, m.Version, m.Version)
}
