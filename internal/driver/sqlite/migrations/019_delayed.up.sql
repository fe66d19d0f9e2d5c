-- A queue's delayed jobs: scheduled with no rate limit holding them (run
-- ahead, or retried after a backoff), which wait only for the dispatcher
-- to make them ready once due. The gauge of the oldest waiting job reads
-- each queue's lowest run_at among them as one entry of this index, so
-- that one that came due and that no process made ready counts as
-- waiting, however many jobs are scheduled behind it.
CREATE INDEX sluice_jobs_delayed ON sluice_jobs (queue, run_at) WHERE state = 'scheduled' AND wait_key IS NULL;
