package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultMigrationLockWait is how long a migrator waits for the migration
// lock another migrator holds, where the lock has a wait of its own
// (MySQL's GET_LOCK), before it fails with ErrMigrationLocked.
const DefaultMigrationLockWait = 60 * time.Second

// ErrMigrationLocked is returned by MigrateUp and MigrateDown when another
// migrator held the database's migration lock for as long as they wait
// for it (MySQL): they applied and reverted nothing.
var ErrMigrationLocked = errors.New("another migrator holds the migration lock of this database; try again when it is done")

// releaseTimeout bounds the release of a session's migration lock, which
// runs even when the run's context is done.
const releaseTimeout = 10 * time.Second

// migrationRun is one MigrateUp or MigrateDown under the migration lock,
// which it takes once and holds to its end, on every database:
//
//   - where the lock belongs to a connection (SessionLock: MySQL), on a
//     connection the run keeps to the end and runs its transactions on,
//     releasing it after they commit, whatever happens;
//   - elsewhere, in a transaction of the run's (tx) that takes it first
//     (LockMigrations: PostgreSQL's advisory lock or lock row; SQLite's
//     write lock, which BEGIN IMMEDIATE takes) and commits at the end;
//     each migration runs in a savepoint of it, so that one that fails
//     is undone whole while those before it stay applied.
type migrationRun struct {
	s  *Store
	up bool
	// sess holds the session's lock; nil unless SessionLock.
	sess Session
	// tx is the run's transaction, which holds the lock; nil where sess
	// holds it.
	tx Tx
}

// migrate applies (up) or reverts the migrations plan chooses from what
// the database records, in order, and returns those it ran. plan runs
// first before the lock, so that a migrator with nothing to do returns
// without waiting for it, and again once the lock is held: only that
// choice, from what is applied then, is run.
func (s *Store) migrate(ctx context.Context, up bool, plan func(recorded) ([]Migration, error)) (done []Migration, err error) {
	rec, err := s.prepareMigrations(ctx)
	if err != nil {
		return nil, err
	}
	if todo, err := plan(rec); err != nil || len(todo) == 0 {
		return nil, err
	}
	r, err := s.startMigrationRun(ctx, up)
	if err != nil {
		return nil, err
	}
	defer func() { done, err = r.finish(ctx, done, err) }()
	rec, err = s.readRecorded(ctx, r.executor())
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	todo, err := plan(rec)
	if err != nil {
		return nil, err
	}
	for _, m := range todo {
		ran, err := r.migrateOne(ctx, m)
		if err != nil {
			return done, err
		}
		if ran {
			done = append(done, m)
		}
	}
	return done, nil
}

// startMigrationRun takes the migration lock for a whole run: the
// session's, on a connection of the pool's, where the database has one;
// else in the run's transaction.
func (s *Store) startMigrationRun(ctx context.Context, up bool) (*migrationRun, error) {
	r := &migrationRun{s: s, up: up}
	if !s.q.SessionLock() {
		tx, err := s.lockMigrationsInTx(ctx)
		if err != nil {
			return nil, err
		}
		r.tx = tx
		return r, nil
	}
	sn, ok := s.db.(Sessioner)
	if !ok {
		return nil, fmt.Errorf("the %s migration lock needs a connection of its own, which this store's pool (%T) cannot lend", s.d.Name(), s.db)
	}
	sess, err := sn.Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("take a connection for the migration lock: %w", err)
	}
	if err := s.takeMigrationLock(ctx, sess); err != nil {
		_ = sess.Close()
		return nil, err
	}
	r.sess = sess
	return r, nil
}

// migrationLockRetry is how long a migrator rests before it asks again
// for a migration lock whose wait the database cut short.
const migrationLockRetry = 100 * time.Millisecond

// lockMigrationsInTx begins the run's transaction and takes the migration
// lock in it (LockMigrations), waiting as long as ctx lets it: a wait the
// database cut short (PostgreSQL's lock_timeout, set for the role or the
// database) is rolled back and begun again, rather than fail a migrator
// that queued behind another's run.
func (s *Store) lockMigrationsInTx(ctx context.Context) (Tx, error) {
	for {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin the migration run: %w", err)
		}
		q := s.q.LockMigrations()
		if q == "" {
			return tx, nil
		}
		_, err = tx.Exec(ctx, q)
		if err == nil {
			return tx, nil
		}
		_ = tx.Rollback(context.WithoutCancel(ctx))
		if !s.retryable(err) {
			return nil, fmt.Errorf("lock migrations: %w", err)
		}
		t := time.NewTimer(migrationLockRetry)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lock migrations: %w (the last wait: %w)", ctx.Err(), err)
		}
	}
}

// executor is where the run reads what the database records under its
// lock.
func (r *migrationRun) executor() Executor {
	if r.sess != nil {
		return r.sess
	}
	return r.tx
}

// takeMigrationLock takes the session's migration lock on ex, waiting at
// most MigrationLockWait, and fails unless the database says it took it.
func (s *Store) takeMigrationLock(ctx context.Context, ex Executor) error {
	wait := s.MigrationLockWait
	if wait <= 0 {
		wait = DefaultMigrationLockWait
	}
	q, args := s.q.TakeMigrationLock(int64(math.Ceil(wait.Seconds())))
	got, err := queryColumn[sql.NullInt64](ctx, ex, q, args)
	switch {
	case err != nil:
		return fmt.Errorf("take the migration lock: %w", err)
	case len(got) != 1 || !got[0].Valid:
		return errors.New("take the migration lock: the database reported an error instead of taking it")
	case got[0].Int64 != 1:
		return fmt.Errorf("waited %v for the migration lock: %w", wait, ErrMigrationLocked)
	}
	return nil
}

// finish ends the run and returns what it ran (done) and its err. A
// session's lock is released and its connection given back; a connection
// whose lock would not release is closed instead, which ends the lock
// with it, and what went wrong there is returned only if the lock may
// still be held. The run's transaction releases its lock and commits the
// migrations that ran, even after one failed (its savepoint is undone);
// if the commit fails, none of them is applied.
func (r *migrationRun) finish(ctx context.Context, done []Migration, err error) ([]Migration, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if r.tx != nil {
		var cerr error
		if q := r.s.q.UnlockMigrations(); q != "" {
			_, cerr = r.tx.Exec(ctx, q)
		}
		if cerr == nil {
			cerr = r.tx.Commit(ctx)
		} else {
			_ = r.tx.Rollback(ctx)
		}
		if cerr != nil {
			if len(done) > 0 {
				cerr = fmt.Errorf("commit the migration run (%s rolled back with it): %w", names(done), cerr)
			} else {
				cerr = fmt.Errorf("end the migration run: %w", cerr)
			}
			return nil, errors.Join(err, cerr)
		}
		return done, err
	}
	if _, rerr := r.sess.Exec(ctx, r.s.q.ReleaseMigrationLock()); rerr != nil {
		if derr := r.sess.Discard(); derr != nil {
			return done, errors.Join(err, fmt.Errorf("release the migration lock: %w; close its connection: %w", rerr, derr))
		}
		return done, err
	}
	_ = r.sess.Close()
	return done, err
}

// begin starts a transaction of the run: on its session's connection,
// where it has one, else a savepoint of the run's transaction.
func (r *migrationRun) begin(ctx context.Context) (Tx, error) {
	if r.sess != nil {
		return r.sess.Begin(ctx)
	}
	m, err := r.s.MarkTx(ctx, r.tx)
	if err != nil {
		return nil, err
	}
	return savepoint{r.tx, m}, nil
}

// savepoint is a migration's part of the run's transaction: Commit keeps
// what it did, Rollback undoes it, and the transaction goes on.
type savepoint struct {
	Tx
	m Mark
}

func (sp savepoint) Commit(ctx context.Context) error   { return sp.m.Keep(ctx) }
func (sp savepoint) Rollback(ctx context.Context) error { return sp.m.Undo(ctx) }

// migrateOne applies or reverts m unless that is done, and reports
// whether it ran. A revert whose version has a check (revertChecks) runs
// it first, and is refused, with nothing of it run, if the check fails.
func (r *migrationRun) migrateOne(ctx context.Context, m Migration) (bool, error) {
	if r.s.q.TracksMigrationProgress() {
		return r.stepwise(ctx, m)
	}
	return r.whole(ctx, m)
}

// whole runs m in one transaction of the run's (a savepoint, where the
// run's transaction holds the lock).
func (r *migrationRun) whole(ctx context.Context, m Migration) (bool, error) {
	s := r.s
	ran := false
	err := s.inTxOn(ctx, r.begin, func(tx Tx) error {
		ran = false
		rec, err := s.readRecorded(ctx, tx)
		if err != nil {
			return fmt.Errorf("read applied migrations: %w", err)
		}
		if rec.needs(m.Version, r.up) {
			if !r.up {
				if err := s.checkRevert(ctx, tx, m); err != nil {
					return err
				}
			}
			stmts := Statements(m.body(r.up))
			for i, stmt := range stmts {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return r.statementFailed(m, stmts, i, err)
				}
			}
			if err := r.record(ctx, tx, m); err != nil {
				return err
			}
			ran = true
		}
		return nil
	})
	return ran, err
}

// stepwise runs m where DDL commits at once (MySQL): a statement at a
// time, each followed by the record of how many have run, so that a later
// run resumes after those that did. The run holds the session's lock throughout.
func (r *migrationRun) stepwise(ctx context.Context, m Migration) (bool, error) {
	s := r.s
	rec, err := s.readRecorded(ctx, r.sess)
	if err != nil {
		return false, fmt.Errorf("read applied migrations: %w", err)
	}
	p, partly := rec.partly(m.Version)
	switch {
	case partly && p.up != r.up:
		return false, r.underWay(m, p)
	case !rec.needs(m.Version, r.up):
		return false, nil
	case !r.up && p.done == 0:
		if err := s.checkRevert(ctx, r.sess, m); err != nil {
			return false, err
		}
	}
	stmts := Statements(m.body(r.up))
	for i := p.done; i < len(stmts); i++ {
		// The statement commits as it runs, so it and the record of it
		// are two transactions: one run again after a deadlock runs again
		// only what did not commit. (A process that dies between the two
		// leaves the statement applied and not counted: operations.md
		// says how to finish such a migration by hand.)
		err := s.inTxOn(ctx, r.begin, func(tx Tx) error {
			if _, err := tx.Exec(ctx, stmts[i]); err != nil {
				return r.statementFailed(m, stmts, i, err)
			}
			return nil
		})
		if err == nil {
			err = s.inTxOn(ctx, r.begin, func(tx Tx) error {
				q, args := s.q.SaveMigrationProgress(m.Version, r.direction(), i+1)
				if _, err := exec(ctx, tx, q, args); err != nil {
					return fmt.Errorf("record the progress of migration %03d_%s: %w", m.Version, m.Name, err)
				}
				return nil
			})
		}
		if err != nil {
			return false, err
		}
	}
	err = s.inTxOn(ctx, r.begin, func(tx Tx) error {
		if err := r.record(ctx, tx, m); err != nil {
			return err
		}
		q, args := s.q.ClearMigrationProgress(m.Version)
		if _, err := exec(ctx, tx, q, args); err != nil {
			return fmt.Errorf("clear the progress of migration %03d: %w", m.Version, err)
		}
		return nil
	})
	return err == nil, err
}

// direction is how the migration progress names the run's direction.
func (r *migrationRun) direction() string {
	if r.up {
		return "up"
	}
	return "down"
}

// statementFailed says which of m's statements (the i-th of stmts)
// failed, and, where the ones before it stay applied (stepwise), that the
// next run resumes at it.
func (r *migrationRun) statementFailed(m Migration, stmts []string, i int, err error) error {
	verb, done := "apply", "applied"
	if !r.up {
		verb, done = "revert", "reverted"
	}
	failed := fmt.Errorf("%s migration %03d_%s: statement %d of %d: %w\n%s", verb, m.Version, m.Name, i+1, len(stmts), err, stmts[i])
	if !r.s.q.TracksMigrationProgress() || i == 0 {
		return failed
	}
	stay := "statement 1 stays"
	if i > 1 {
		stay = fmt.Sprintf("statements 1 to %d stay", i)
	}
	return fmt.Errorf("%w\n(%s %s, as the database commits DDL at once; once the cause is fixed, `migrate %s` resumes at statement %d)",
		failed, stay, done, r.direction(), i+1)
}

// underWay refuses to run m while it is applied or reverted part way in
// the other direction: only finishing that move knows what its
// statements left.
func (r *migrationRun) underWay(m Migration, p progressRow) error {
	n := len(Statements(m.body(p.up)))
	if p.up {
		return fmt.Errorf("migration %03d_%s is partly applied (%d of %d statements ran before it failed): run `migrate up` to finish it before reverting",
			m.Version, m.Name, p.done, n)
	}
	return fmt.Errorf("migration %03d_%s is partly reverted (%d of %d statements ran before it failed): run `migrate down` to finish reverting it before applying",
		m.Version, m.Name, p.done, n)
}

// record records m as applied (up) or reverted.
func (r *migrationRun) record(ctx context.Context, ex Executor, m Migration) error {
	q, args := r.s.q.ForgetMigration(m.Version)
	if r.up {
		q, args = r.s.q.RecordMigration(m.Version, m.Name, Micros(time.Now()))
	}
	if _, err := exec(ctx, ex, q, args); err != nil {
		return fmt.Errorf("record migration %03d: %w", m.Version, err)
	}
	return nil
}
