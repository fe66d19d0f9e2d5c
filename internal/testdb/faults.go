package testdb

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Fault is the error a Faults pool injects: a deadlock, as far as the
// store can tell, so the store runs the transaction again.
type Fault struct {
	// N is the number of the statement or commit that failed.
	N int
}

func (f Fault) Error() string { return fmt.Sprintf("injected deadlock at statement %d", f.N) }

// Retryable reports true: the store treats a Fault as it treats a
// deadlock or a serialization failure.
func (Fault) Retryable() bool { return true }

// Faults is a store pool that fails chosen statements, or the commit of a
// chosen transaction, with a Fault, as a deadlock or serialization failure
// would. A failed commit rolls the transaction back first, so the
// database holds nothing of it. Statements are counted from 1 across the
// pool and its transactions (a commit counts as one); Refuse fails
// statements whose arguments hold a marker, with a plain error.
type Faults struct {
	engine.DB
	mu     sync.Mutex
	n      int
	failAt map[int]bool
	// Poison, when set, makes every statement whose arguments contain it
	// (a string, or a string in a []string) fail with a plain,
	// non-retryable error, as a database refusing a value would.
	Poison string
	// FailOnce, when set, makes the first statement whose text contains
	// it fail with a Fault, before it reaches the database, as a deadlock
	// at that statement would. Set it before the store runs anything.
	FailOnce string
	// BeforeRetry, when set, runs at the first Begin after a fault fired:
	// between the failed attempt (rolled back by then) and the store's
	// retry, where another process's transaction could commit.
	BeforeRetry func()
	// Observe, when set, is called with every statement counted (its
	// text and arguments; "" and nil for a commit), pipelined ones too,
	// before any fault due at it fires: a test's way to see how the store
	// split its work into statements without changing how they are sent.
	// Set it before the store runs anything.
	Observe func(q string, args []any)
	fired   bool
}

// WithFaults returns a store over s's database whose statements f counts
// and fails.
func WithFaults(s *engine.Store) (*engine.Store, *Faults) {
	f := &Faults{DB: s.DB(), failAt: map[int]bool{}}
	return engine.New(s.Dialect(), f), f
}

// FailAt makes the statement (or commit) n statements from now fail.
func (f *Faults) FailAt(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt[f.n+n] = true
}

// Count returns how many statements and commits ran so far.
func (f *Faults) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// Pending reports whether an injected fault has not fired yet.
func (f *Faults) Pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n := range f.failAt {
		if n > f.n {
			return true
		}
	}
	return false
}

// SetPoison sets Poison ("" for none) while the store may be running
// statements.
func (f *Faults) SetPoison(marker string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Poison = marker
}

// Clear drops every fault not yet fired.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt = map[int]bool{}
}

// next counts one statement (q; "" for a commit) and returns the fault
// due at it, if any.
func (f *Faults) next(q string, args []any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.Observe != nil {
		f.Observe(q, args)
	}
	if f.FailOnce != "" && strings.Contains(q, f.FailOnce) {
		f.FailOnce = ""
		f.fired = true
		return Fault{N: f.n}
	}
	if f.failAt[f.n] {
		delete(f.failAt, f.n)
		f.fired = true
		return Fault{N: f.n}
	}
	if f.Poison != "" && poisoned(args, f.Poison) {
		return fmt.Errorf("injected refusal: a value holds %q", f.Poison)
	}
	return nil
}

func poisoned(args []any, marker string) bool {
	for _, a := range args {
		switch v := a.(type) {
		case string:
			if strings.Contains(v, marker) {
				return true
			}
		case []string:
			for _, s := range v {
				if strings.Contains(s, marker) {
					return true
				}
			}
		}
	}
	return false
}

// Exec counts and runs a statement.
func (f *Faults) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := f.next(q, args); err != nil {
		return engine.Result{}, err
	}
	return f.DB.Exec(ctx, q, args...)
}

// Query counts and runs a statement.
func (f *Faults) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := f.next(q, args); err != nil {
		return nil, err
	}
	return f.DB.Query(ctx, q, args...)
}

// Begin starts a transaction whose statements and commit are counted.
func (f *Faults) Begin(ctx context.Context) (engine.Tx, error) {
	return f.begin(ctx, f.DB.Begin)
}

// BeginRead starts a read-only transaction whose statements and commit
// are counted.
func (f *Faults) BeginRead(ctx context.Context) (engine.Tx, error) {
	return f.begin(ctx, f.DB.BeginRead)
}

// Session lends one connection of the pool (which must lend them), whose
// statements and transactions are counted and failed as the pool's.
func (f *Faults) Session(ctx context.Context) (engine.Session, error) {
	sn, ok := f.DB.(engine.Sessioner)
	if !ok {
		return nil, fmt.Errorf("testdb: the pool (%T) lends no sessions", f.DB)
	}
	sess, err := sn.Session(ctx)
	if err != nil {
		return nil, err
	}
	return &faultSession{Session: sess, f: f}, nil
}

// faultSession is a session whose statements and transactions a Faults
// counts.
type faultSession struct {
	engine.Session
	f *Faults
}

func (s *faultSession) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := s.f.next(q, args); err != nil {
		return engine.Result{}, err
	}
	return s.Session.Exec(ctx, q, args...)
}

func (s *faultSession) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := s.f.next(q, args); err != nil {
		return nil, err
	}
	return s.Session.Query(ctx, q, args...)
}

func (s *faultSession) Begin(ctx context.Context) (engine.Tx, error) {
	return s.f.begin(ctx, s.Session.Begin)
}

// begin starts a transaction with begin (the pool's or a session's), after
// the BeforeRetry hook where a fault fired.
func (f *Faults) begin(ctx context.Context, begin func(context.Context) (engine.Tx, error)) (engine.Tx, error) {
	f.mu.Lock()
	hook := f.BeforeRetry
	if !f.fired {
		hook = nil
	}
	f.fired = false
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	tx, err := begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := tx.(engine.Pipeliner); ok {
		return &faultPipeTx{faultTx{Tx: tx, f: f}}, nil
	}
	return &faultTx{Tx: tx, f: f}, nil
}

type faultTx struct {
	engine.Tx
	f *Faults
	// committed is set once PipelineCommit has committed.
	committed bool
}

func (t *faultTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := t.f.next(q, args); err != nil {
		return engine.Result{}, err
	}
	return t.Tx.Exec(ctx, q, args...)
}

func (t *faultTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := t.f.next(q, args); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, q, args...)
}

// Commit fails when a fault is due: the transaction is rolled back, so
// nothing of it lands, as after a serialization failure at commit.
func (t *faultTx) Commit(ctx context.Context) error {
	if t.committed {
		return nil
	}
	if err := t.f.next("", nil); err != nil {
		_ = t.Tx.Rollback(ctx)
		return err
	}
	return t.Tx.Commit(ctx)
}

// faultPipeTx keeps the pipelining of a transaction that has it: a
// pipeline fails before anything is sent when a fault is due at any of
// its statements.
type faultPipeTx struct{ faultTx }

func (t *faultPipeTx) Pipeline(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	for _, st := range stmts {
		if err := t.f.next(st.SQL, st.Args); err != nil {
			return err
		}
	}
	return t.Tx.(engine.Pipeliner).Pipeline(ctx, stmts, read)
}

// PipelineCommit counts its statements and its commit as Pipeline and
// Commit do: a fault due at a statement fails it before anything is sent,
// and one due at the commit runs the statements and rolls them back.
func (t *faultPipeTx) PipelineCommit(ctx context.Context, stmts []engine.Stmt, read func(int, engine.Rows) error) error {
	for _, st := range stmts {
		if err := t.f.next(st.SQL, st.Args); err != nil {
			return err
		}
	}
	if err := t.f.next("", nil); err != nil {
		if perr := t.Tx.(engine.Pipeliner).Pipeline(ctx, stmts, read); perr != nil {
			return perr
		}
		_ = t.Tx.Rollback(ctx)
		return err
	}
	if p, ok := t.Tx.(engine.CommitPipeliner); ok {
		if err := p.PipelineCommit(ctx, stmts, read); err != nil {
			return err
		}
		t.committed = true
		return nil
	}
	if err := t.Tx.(engine.Pipeliner).Pipeline(ctx, stmts, read); err != nil {
		return err
	}
	t.committed = true
	return t.Tx.Commit(ctx)
}
