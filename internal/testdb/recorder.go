package testdb

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Recorder is a store pool that records the text of every statement run
// through it, in its transactions too.
type Recorder struct {
	engine.DB
	// Before, when set, runs before each statement (given its text), after
	// the statement is recorded: a test's way to act at a point within a
	// transaction. Set it before the store runs anything.
	Before func(q string)
	mu     sync.Mutex
	stmts  []string
}

// Record returns a store over s's database whose statements r records.
func Record(s *engine.Store) (*engine.Store, *Recorder) {
	r := &Recorder{DB: s.DB()}
	return engine.New(s.Dialect(), r), r
}

func (r *Recorder) record(q string) {
	r.mu.Lock()
	r.stmts = append(r.stmts, q)
	r.mu.Unlock()
	if r.Before != nil {
		r.Before(q)
	}
}

// Exec records and runs a statement.
func (r *Recorder) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	r.record(q)
	return r.DB.Exec(ctx, q, args...)
}

// Query records and runs a statement.
func (r *Recorder) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	r.record(q)
	return r.DB.Query(ctx, q, args...)
}

// Begin starts a transaction whose statements are recorded too.
func (r *Recorder) Begin(ctx context.Context) (engine.Tx, error) {
	return r.wrapTx(r.DB.Begin(ctx))
}

// BeginRead starts a read-only transaction whose statements are recorded
// too.
func (r *Recorder) BeginRead(ctx context.Context) (engine.Tx, error) {
	return r.wrapTx(r.DB.BeginRead(ctx))
}

// wrapTx records the statements of a transaction begun.
func (r *Recorder) wrapTx(tx engine.Tx, err error) (engine.Tx, error) {
	if err != nil {
		return nil, err
	}
	return &recTx{Tx: tx, r: r}, nil
}

// Session lends one connection of the pool (which must lend them), whose
// statements are recorded too.
func (r *Recorder) Session(ctx context.Context) (engine.Session, error) {
	sn, ok := r.DB.(engine.Sessioner)
	if !ok {
		return nil, fmt.Errorf("testdb: the pool (%T) lends no sessions", r.DB)
	}
	sess, err := sn.Session(ctx)
	if err != nil {
		return nil, err
	}
	return &recSession{Session: sess, r: r}, nil
}

type recSession struct {
	engine.Session
	r *Recorder
}

func (s *recSession) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	s.r.record(q)
	return s.Session.Exec(ctx, q, args...)
}

func (s *recSession) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	s.r.record(q)
	return s.Session.Query(ctx, q, args...)
}

func (s *recSession) Begin(ctx context.Context) (engine.Tx, error) {
	return s.r.wrapTx(s.Session.Begin(ctx))
}

// Take returns the statements recorded since the last Take.
func (r *Recorder) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

type recTx struct {
	engine.Tx
	r *Recorder
}

func (t *recTx) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	t.r.record(q)
	return t.Tx.Exec(ctx, q, args...)
}

func (t *recTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	t.r.record(q)
	return t.Tx.Query(ctx, q, args...)
}

// Seen returns the statements recorded since the last Take, leaving them
// recorded.
func (r *Recorder) Seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stmts)
}
