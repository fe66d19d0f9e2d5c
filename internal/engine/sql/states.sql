-- The predicates that say a job (alias j) is in a state, and the column
-- that keys it there. MySQL replaces them with its generated columns,
-- which are NULL outside the state, so each state has an index of its own.

-- fragment: ReadyPlainJob
j.state = 'ready' AND j.rate_keys IS NULL AND j.fair_key IS NULL

-- fragment: ReadyPlainQueue
j.queue

-- fragment: ReadyPlain
{ReadyPlainJob} AND {ReadyPlainQueue} = :queue

-- fragment: ReadyLimitedJob
j.state = 'ready' AND j.rate_keys IS NOT NULL AND j.fair_key IS NULL

-- fragment: ReadyLimitedQueue
j.queue

-- fragment: ReadyLimited
{ReadyLimitedJob} AND {ReadyLimitedQueue} = :queue

-- fragment: ReadyFairJob
-- Fair jobs (with or without rate-limit keys) are a stream of their own.
j.state = 'ready' AND j.fair_key IS NOT NULL

-- fragment: ReadyFairQueue
j.queue

-- fragment: ReadyFair
{ReadyFairJob} AND {ReadyFairQueue} = :queue

-- fragment: ScheduledJob
j.state = 'scheduled'

-- fragment: DueAt
j.run_at

-- fragment: ScheduledKey
-- The budget a scheduled job holds a slot of.
j.wait_key

-- fragment: DelayedJob
-- A scheduled job no rate limit holds a slot for: run ahead, or retried
-- after a backoff; ready once due (migration 019).
j.state = 'scheduled' AND j.wait_key IS NULL

-- fragment: DelayedQueue
j.queue

-- fragment: ParkedPlainJob
-- A budget's parked jobs are two streams, as ready ones are: those without
-- a fairness key, unparked by priority and id, and fair ones, unparked by
-- priority and virtual start.
j.state = 'parked' AND j.fair_key IS NULL

-- fragment: ParkedPlainKey
-- The budget a parked job waits on.
j.wait_key

-- fragment: ParkedFairJob
j.state = 'parked' AND j.fair_key IS NOT NULL

-- fragment: ParkedFairKey
j.wait_key

-- fragment: WaitingFairJob
-- Fair jobs waiting to be ready: delayed, deferred or parked by a rate
-- limit, blocked on a concurrency slot. A level's virtual time, with none
-- of its fair jobs ready, is no later than the lowest start among them.
j.state IN ('scheduled', 'parked', 'blocked') AND j.fair_key IS NOT NULL

-- fragment: WaitingFairQueue
j.queue

-- fragment: WaitingFair
{WaitingFairJob} AND {WaitingFairQueue} = :queue

-- fragment: BlockedJob
j.state = 'blocked'

-- fragment: BlockedKey
j.conc_key

-- fragment: BlockedFairJob
-- Blocked fair jobs: a freed slot of their key goes to them by start.
j.state = 'blocked' AND j.fair_key IS NOT NULL

-- fragment: BlockedFairKey
j.conc_key

-- fragment: RunningJob
j.state = 'running'

-- fragment: RunningProcess
j.process_id

-- fragment: DoneJob
j.state IN ('completed', 'cancelled')

-- fragment: DoneAt
j.finished_at

-- fragment: FailedJob
j.state = 'failed'

-- fragment: FailedQueue
j.queue

-- fragment: QueueNotPaused
-- A paused queue's ready jobs stay where they are.
NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = :queue AND paused = TRUE)

-- {JobQueueNotPaused}, that the queue of job j is not paused, is
-- engine.JobQueueNotPaused (dialect.go): the dashboards' counts of jobs
-- ahead use it too.
