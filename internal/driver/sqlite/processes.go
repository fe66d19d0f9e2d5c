package sqlite

import "github.com/sluicequeue/sluice/internal/engine"

var _ engine.RunningCounter = Dialect{}

// RunningPerProcess counts running jobs per process through the partial
// index on running jobs.
func (Dialect) RunningPerProcess() string {
	return `SELECT process_id, COUNT(*) FROM sluice_jobs WHERE state = 'running' GROUP BY process_id`
}
