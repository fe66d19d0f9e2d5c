package ui_test

import (
	"context"
	"sync/atomic"

	"github.com/sluicequeue/sluice/internal/engine"
)

// rowCounter is a store pool that counts the rows its statements return,
// in its transactions too.
type rowCounter struct {
	engine.DB
	rows atomic.Int64
}

func (c *rowCounter) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	rs, err := c.DB.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return &countedRows{Rows: rs, n: &c.rows}, nil
}

func (c *rowCounter) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := c.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countedTx{Tx: tx, n: &c.rows}, nil
}

func (c *rowCounter) BeginRead(ctx context.Context) (engine.Tx, error) {
	tx, err := c.DB.BeginRead(ctx)
	if err != nil {
		return nil, err
	}
	return &countedTx{Tx: tx, n: &c.rows}, nil
}

type countedTx struct {
	engine.Tx
	n *atomic.Int64
}

func (t *countedTx) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	rs, err := t.Tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return &countedRows{Rows: rs, n: t.n}, nil
}

type countedRows struct {
	engine.Rows
	n *atomic.Int64
}

func (r *countedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n.Add(1)
	}
	return ok
}
