package testdb

import (
	"fmt"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// WithDatabaseClock returns a store over s's database whose own clock —
// the one engine.DatabaseTime reads — is now, on every backend (SQLite,
// which has no clock of its own, included): for tests of hosts whose
// clocks are off from the database's.
func WithDatabaseClock(s *engine.Store, now func() time.Time) *engine.Store {
	return engine.New(clockDialect{Dialect: s.Dialect(), now: now}, s.DB())
}

// clockDialect reads its clock from a function instead of the database.
type clockDialect struct {
	engine.Dialect
	now func() time.Time
}

// Now returns the function's time as a literal.
func (d clockDialect) Now() string { return fmt.Sprintf("SELECT %d", d.now().UnixMicro()) }

// IDStep forwards the dialect's, for MySQL's multi-row inserts.
func (d clockDialect) IDStep() int64 {
	if st, ok := d.Dialect.(engine.IDStep); ok {
		return st.IDStep()
	}
	return 1
}
