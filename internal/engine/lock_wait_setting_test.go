package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// A promotion that makes a missing semaphore row bounds its lock wait to
// a millisecond while it does (PostgreSQL's ShortLockWait, in a
// savepoint) and then sets the bound back. It set it back with SET LOCAL
// lock_timeout = DEFAULT: the role's, database's or server's default (0,
// no bound), not the value the transaction had. An app that bounds lock
// waits on its connections (SET lock_timeout, a shared pool's
// AfterConnect: OpenPool) or in the transaction (SET LOCAL) lost its
// bound for the rest of the promotion's transaction, and the promotion,
// or the worker's claim around it, then waited without one. The bound
// the transaction had is now kept and set back, whichever way it was
// set, when the row is made (the savepoint kept) and when another
// transaction is making it (the savepoint rolled back, which undoes the
// setting by itself).
//
// Only PostgreSQL bounds a wait that way. On MySQL the promotion probes
// the keys with a locking read that fails at once (NOWAIT) and changes no
// setting: the test checks that the session's innodb_lock_wait_timeout
// stays as the app set it there too. SQLite has one writer and no lock
// waits, hence no such setting.
func TestAPromotionKeepsTheTransactionsLockWaitBound(t *testing.T) {
	// set sets the app's bound, show reads it, per database and per where
	// the app sets it.
	type setting struct{ set, show, want string }
	settings := map[string]map[string]setting{
		"session": {
			"postgres": {"SET lock_timeout = '5s'", "SHOW lock_timeout", "5s"},
			"mysql":    {"SET SESSION innodb_lock_wait_timeout = 5", "SELECT @@SESSION.innodb_lock_wait_timeout", "5"},
		},
		"transaction": {
			"postgres": {"SET LOCAL lock_timeout = '5s'", "SHOW lock_timeout", "5s"},
		},
	}
	for _, where := range []string{"session", "transaction"} {
		for _, outcome := range []string{"made", "being made elsewhere"} {
			t.Run(where+"/"+outcome, func(t *testing.T) {
				eachApp(t, func(t *testing.T, s *engine.Store, open func() *engine.Store, app func() appDB) {
					v, ok := settings[where][s.Dialect().Name()]
					if !ok {
						t.Skipf("no %s bound on lock waits here to keep", where)
					}
					ctx := context.Background()
					d := concJob("c", 1, time.Minute)
					d.RunAt = at(3 * time.Hour)
					id := enqueue(t, s, t0, d)[0]
					cleared, err := s.ClearIdleSemaphores(ctx, engine.At(at(2*time.Hour)), time.Hour, 500, 0)
					require.NoError(t, err)
					require.Equal(t, 1, cleared, "c's row, idle for two hours, is deleted: the promotion makes it")

					end := func() {}
					if outcome == "being made elsewhere" {
						a := app()
						tx := a.begin(t)
						_, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(3*time.Hour)), []engine.NewJob{concJob("c", 1, time.Minute)})
						require.NoError(t, err)
						end = tx.rollback
					}
					db := &settingsDB{DB: s.DB(), set: v.set, show: v.show}
					ps := engine.New(s.Dialect(), db)
					returned, err := returnsWhileOpen(t, func() error {
						_, _, err := ps.Promote(ctx, engine.At(at(3*time.Hour+time.Second)), 500)
						return err
					}, end)
					require.NoError(t, err)
					require.True(t, returned, "the promotion waited for the app's transaction")
					want := engine.StateReady
					if outcome == "being made elsewhere" {
						want = engine.StateScheduled
					}
					require.Equal(t, want, state(t, s, id).State)
					require.Equal(t, []string{v.want}, db.seen(), "the promotion's transaction ends with the bound the app set (%s)", v.set)
				})
			})
		}
	}
}

// settingsDB is a pool whose transactions run set first (an app's own
// setting, on the connection or for the transaction) and read show's
// value just before they commit.
type settingsDB struct {
	engine.DB
	set, show string
	mu        sync.Mutex
	shown     []string
}

func (d *settingsDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, d.set); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	st := &settingsTx{Tx: tx, d: d}
	if _, ok := tx.(engine.Pipeliner); ok {
		return settingsPipeTx{st}, nil
	}
	return st, nil
}

// seen returns the values show read at each commit.
func (d *settingsDB) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.shown...)
}

type settingsTx struct {
	engine.Tx
	d *settingsDB
}

func (t *settingsTx) Commit(ctx context.Context) error {
	rows, err := t.Tx.Query(ctx, t.d.show)
	if err != nil {
		return err
	}
	var v string
	for rows.Next() {
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	t.d.mu.Lock()
	t.d.shown = append(t.d.shown, v)
	t.d.mu.Unlock()
	return t.Tx.Commit(ctx)
}

// settingsPipeTx keeps the transaction's pipelines (PostgreSQL's), so
// that the promotion sends what it sends in production.
type settingsPipeTx struct{ *settingsTx }

func (t settingsPipeTx) Pipeline(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	return t.Tx.(engine.Pipeliner).Pipeline(ctx, stmts, read)
}
