-- A queue's delayed jobs: scheduled with no rate limit holding them (run
-- ahead, or retried after a backoff), which wait only for the dispatcher
-- to make them ready once due. The generated key delayed_queue holds the
-- job's queue while it is such a job, and is NULL otherwise, as the other
-- states' keys are outside their state: the gauge of the oldest waiting
-- job reads each queue's lowest due_at among them as one entry of its
-- index, so that one that came due and that no process made ready counts
-- as waiting, however many jobs are scheduled behind it. One statement,
-- so one rewrite of the table.
ALTER TABLE sluice_jobs
  ADD COLUMN delayed_queue VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'scheduled' AND wait_key IS NULL, queue, NULL)) STORED,
  ADD KEY sluice_jobs_delayed (delayed_queue, due_at);
