package store

import "github.com/sluicequeue/sluice/internal/engine"

// State is where a job is in its life.
type State = engine.State

// The states of a job.
const (
	// StateReady jobs wait for a worker.
	StateReady = engine.StateReady
	// StateScheduled jobs wait for their run time: a delay, a retry's
	// backoff, or the slot a rate limit gave them.
	StateScheduled = engine.StateScheduled
	// StateParked jobs wait, past the horizon, for their rate-limit budget
	// to unpark them.
	StateParked = engine.StateParked
	// StateBlocked jobs wait for a slot of their concurrency key.
	StateBlocked = engine.StateBlocked
	// StateRunning jobs are being worked.
	StateRunning = engine.StateRunning
	// StateCompleted jobs finished without error.
	StateCompleted = engine.StateCompleted
	// StateFailed jobs used up their attempts (or failed for good).
	StateFailed = engine.StateFailed
	// StateCancelled jobs were cancelled, by their handler or an operator.
	StateCancelled = engine.StateCancelled
)

// JobInfo is a stored job with everything an operator may want to see.
type JobInfo = engine.JobInfo

// Tick is one recorded run of a recurring task.
type Tick = engine.Tick
