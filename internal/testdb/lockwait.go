package testdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// SessionID returns the database's id of the session a transaction runs
// on (PostgreSQL's backend pid, MySQL's connection id), which
// AwaitLockWait watches.
func SessionID(ctx context.Context, s *engine.Store, tx engine.Tx) (int64, error) {
	var q string
	switch s.Dialect().Name() {
	case "postgres":
		q = "SELECT pg_backend_pid()"
	case "mysql":
		q = "SELECT CONNECTION_ID()"
	default:
		return 0, fmt.Errorf("testdb: SessionID: %s has no sessions to watch", s.Dialect().Name())
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var id int64
	if !rows.Next() {
		return 0, errors.New("testdb: SessionID: no row")
	}
	if err := rows.Scan(&id); err != nil {
		return 0, err
	}
	return id, rows.Err()
}

// AwaitLockWait returns once the session id (SessionID) waits for a row
// lock, or done is closed (the session finished without waiting), and
// fails after ten seconds: a test's way to let a transaction reach its
// wait before another goes on. It reads through s's pool, which must be
// another than the session's.
func AwaitLockWait(ctx context.Context, s *engine.Store, id int64, done <-chan struct{}) error {
	var q string
	every := 5 * time.Millisecond
	switch s.Dialect().Name() {
	case "postgres":
		q = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'"
	case "mysql":
		q = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'"
		// InnoDB refreshes the table's cache only when it was last read
		// 0.1 s ago or more: reading it more often keeps it stale.
		every = 150 * time.Millisecond
	default:
		return fmt.Errorf("testdb: AwaitLockWait: %s has no sessions to watch", s.Dialect().Name())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		rows, err := s.DB().Query(ctx, q, id)
		if err != nil {
			return err
		}
		var n int64
		if rows.Next() {
			err = rows.Scan(&n)
		}
		rows.Close()
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testdb: AwaitLockWait: session %d neither waited for a lock nor finished in 10s", id)
		}
		time.Sleep(every)
	}
}

// CallWhileHeld runs call in a transaction of its own on caller's pool, in
// a goroutine (a caller's enqueue, say, at a moment another transaction
// holds locks it will want), and returns once that transaction waits for
// a lock or has finished, watching it through s's pool. wait waits for it
// and returns call's error, or the commit's: call's transaction is rolled
// back when call fails, committed otherwise.
func CallWhileHeld(t testing.TB, s, caller *engine.Store, call func(tx engine.Tx) error) (wait func() error) {
	t.Helper()
	ctx := context.Background()
	tx, err := caller.DB().Begin(ctx)
	if err != nil {
		t.Fatalf("testdb: CallWhileHeld: %v", err)
	}
	sid, err := SessionID(ctx, caller, tx)
	if err != nil {
		t.Fatalf("testdb: CallWhileHeld: %v", err)
	}
	done := make(chan struct{})
	var callErr error
	go func() {
		defer close(done)
		if callErr = call(tx); callErr != nil {
			_ = tx.Rollback(ctx)
			return
		}
		callErr = tx.Commit(ctx)
	}()
	if err := AwaitLockWait(ctx, s, sid, done); err != nil {
		t.Errorf("testdb: CallWhileHeld: %v", err)
	}
	return func() error {
		<-done
		return callErr
	}
}

// Count counts the statements that contain marker.
func Count(stmts []string, marker string) int {
	n := 0
	for _, q := range stmts {
		if strings.Contains(q, marker) {
			n++
		}
	}
	return n
}
