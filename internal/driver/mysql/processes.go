package mysql

import "github.com/sluicequeue/sluice/internal/engine"

var _ engine.RunningCounter = Dialect{}

// RunningPerProcess counts running jobs per process through the key on
// running_process, which holds a value only while a job runs.
func (Dialect) RunningPerProcess() string {
	return `SELECT running_process, COUNT(*) FROM sluice_jobs WHERE running_process IS NOT NULL GROUP BY running_process`
}
