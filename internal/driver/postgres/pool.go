package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicequeue/sluice/internal/engine"
)

// OpenPool returns a store over a pool the app already has, so that the
// app and sluice share its connections and the app can enqueue inside its
// own transactions on it (Client.EnqueueTx with a pgx.Tx). The app owns
// the pool: Store.Close leaves it open, and the app closes it after the
// store. Workers on PostgreSQL LISTEN on one connection of their own,
// outside the pool but made as the pool makes its connections: from a copy
// of its ConnConfig, through its BeforeConnect and AfterConnect hooks, and
// closed through its BeforeClose (its acquire hooks do not apply). It
// checks that the database answers, and that the pool does not prepare
// named statements through a pooler that shares them (as Open); it does
// not migrate.
func OpenPool(ctx context.Context, pool *pgxpool.Pool) (*engine.Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: OpenPool: the pool is nil")
	}
	if err := pool.Ping(ctx); err != nil {
		c := pool.Config().ConnConfig
		return nil, fmt.Errorf("postgres: connect to %s:%d: %w", c.Host, c.Port, onceEach(err))
	}
	if err := checkPooler(ctx, pool); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return engine.New(Dialect{}, &DB{pool: pool, shared: true}), nil
}

// onceEach says a failed connection's reason once: pgx reports each
// attempt (TLS, then plain; each address of a host), which are often the
// same failure.
func onceEach(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	inner := errors.Unwrap(ce)
	joined, ok := inner.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var parts []string
	seen := map[string]bool{}
	for _, e := range joined.Unwrap() {
		if msg := e.Error(); !seen[msg] {
			seen[msg] = true
			parts = append(parts, msg)
		}
	}
	return connectError{msg: fmt.Sprintf("failed to connect to `user=%s database=%s`: %s", ce.Config.User, ce.Config.Database, strings.Join(parts, "; ")), err: err}
}

// connectError is a connection error with its repeats left out.
type connectError struct {
	msg string
	err error
}

func (e connectError) Error() string { return e.msg }
func (e connectError) Unwrap() error { return e.err }
