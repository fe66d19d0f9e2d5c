package testdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// WaitForLockWaits waits until n statements or more of s's database (the
// scratch schema or database of this test) whose text contains every one
// of parts wait for a row lock another transaction holds, and reports
// whether they did. There is no event to wait on, so it polls the
// database's own view of its lock waits, every 5 ms: on PostgreSQL
// pg_stat_activity, keeping the backends that hold a lock on this
// schema's table (other tests share the server); on MariaDB the InnoDB
// monitor's list of transactions, which shows a locking read's wait where
// INNODB_TRX may not, keeping those whose locks name this test's
// database. It is bounded: each poll has 2 s, and after 10 s in all it
// fails the test and returns false, so that the caller goes on (a
// statement that never waits, or a deadlock the database broke first,
// then shows in the caller's own checks) and nothing hangs. It fails the
// test with Errorf, never FailNow: it may run in a hook of a claim while
// another goroutine waits.
func WaitForLockWaits(t testing.TB, s *engine.Store, n int, table string, parts ...string) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		waiting, err := lockWaits(s, table, parts)
		if err != nil {
			t.Errorf("testdb: read the lock waits: %v", err)
			return false
		}
		if waiting >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("testdb: %d statements with %q did not wait for a lock within 10 s", n, parts)
	return false
}

// lockWaits counts the statements of s's database whose text contains
// every one of parts and that wait for a lock on table (WaitForLockWaits).
func lockWaits(s *engine.Store, table string, parts []string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch s.Dialect().Name() {
	case "postgres":
		q := `SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' AND a.query LIKE $1
  AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.relation = to_regclass($2))`
		var n int
		rows, err := s.DB().Query(ctx, q, "%"+strings.Join(parts, "%")+"%", table)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return 0, err
			}
		}
		return n, rows.Err()
	case "mysql":
		var db string
		rows, err := s.DB().Query(ctx, "SELECT DATABASE()")
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			if err := rows.Scan(&db); err != nil {
				rows.Close()
				return 0, err
			}
		}
		rows.Close()
		rows, err = s.DB().Query(ctx, "SHOW ENGINE INNODB STATUS")
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var typ, name, status string
			if err := rows.Scan(&typ, &name, &status); err != nil {
				return 0, err
			}
			for _, trx := range strings.Split(status, "---TRANSACTION") {
				match := strings.Contains(trx, "LOCK WAIT") && strings.Contains(trx, "`"+db+"`")
				for _, p := range parts {
					match = match && strings.Contains(trx, p)
				}
				if match {
					n++
				}
			}
		}
		return n, rows.Err()
	}
	return 0, fmt.Errorf("no lock waits to read on %s", s.Dialect().Name())
}
