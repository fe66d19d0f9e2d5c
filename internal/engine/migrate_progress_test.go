package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// A deadlock (a retryable fault) at the statement that records a MySQL
// migration's progress, after the DDL before it committed at once: the
// store runs the transaction again, which runs the committed DDL a second
// time. The migration should still complete (the fault is retryable, as
// at a DDL statement: TestAMigrationRunAgainAfterADeadlockRunsEachStatementOnce).
func TestADeadlockAtTheProgressRecordDoesNotRerunCommittedDDL(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := b.OpenRaw(t)
			_, err := s.MigrateUp(ctx, 12)
			require.NoError(t, err)
			faulty, f := testdb.WithFaults(s)
			f.FailOnce = "INSERT INTO sluice_migration_progress" // after 013's first statement committed
			_, err = faulty.MigrateUp(ctx, 0)
			assert.NoError(t, err, "migrate up, which meets a deadlock recording 013's progress")
			// Once it has failed, no later run gets past statement 1 either:
			// the progress says it has not run, and it cannot run again.
			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err, "migrate up again")
			requireAllApplied(t, s)
		})
	}
}
