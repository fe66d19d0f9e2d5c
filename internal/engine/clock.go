package engine

import (
	"context"
	"fmt"
	"time"
)

// Clock is where a store operation takes its time from. Every time the
// store compares with a stored time comes from the clock that wrote it:
// with DatabaseTime, the database's clock (read in the operation's own
// transaction); with HostTime, the caller's.
//
// The zero Clock reads the host's clock.
type Clock struct {
	host     func() time.Time
	database bool
}

// HostTime decides on the caller's clock: a fake clock in tests, or one
// host's clock where every process runs on it.
func HostTime(now func() time.Time) Clock { return Clock{host: now} }

// At decides at a fixed time, for tests.
func At(t time.Time) Clock { return HostTime(func() time.Time { return t }) }

// DatabaseTime decides on the database's clock, so that skew between the
// hosts of workers and dispatchers cannot move a decision. host stamps
// what is only shown or kept for retention (a job's created_at and
// finished_at), and stands in for the database's clock where the database
// has none of its own (SQLite, which runs in the process).
func DatabaseTime(host func() time.Time) Clock { return Clock{host: host, database: true} }

// Host returns the caller's time.
func (c Clock) Host() time.Time {
	if c.host == nil {
		return time.Now()
	}
	return c.host()
}

// Database reports whether decisions read the database's clock.
func (c Clock) Database() bool { return c.database }

// readsDatabase reports whether c's decisions take a statement: the
// database's clock on a database that has one.
func (s *Store) readsDatabase(c Clock) bool { return c.database && s.d.Now() != "" }

// now returns the time an operation decides at: the database's clock, read
// through ex, or the caller's.
func (s *Store) now(ctx context.Context, ex Executor, c Clock) (time.Time, error) {
	if !s.readsDatabase(c) {
		return c.Host(), nil
	}
	us, err := queryInt64s(ctx, ex, s.d.Now(), nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	if len(us) != 1 {
		return time.Time{}, fmt.Errorf("read the database's clock: got %d rows", len(us))
	}
	return FromMicros(us[0]), nil
}
