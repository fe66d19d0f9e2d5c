-- Fair shares across keys (docs/fairness.md). A fair job carries its key
-- and its virtual start time, set at enqueue; a claim takes a queue's ready
-- fair jobs by (priority, fair_start, id) through a generated key of their
-- own (ready_fair), and the plain and rate-limited keys leave them out.
-- sluice_fair_keys holds each key's last virtual finish, written only by
-- enqueues.
ALTER TABLE sluice_jobs
  ADD COLUMN fair_key VARCHAR(255) NULL,
  ADD COLUMN fair_start BIGINT NULL,
  DROP KEY sluice_jobs_ready_plain,
  DROP KEY sluice_jobs_ready_limited,
  DROP COLUMN ready_plain,
  DROP COLUMN ready_limited;
ALTER TABLE sluice_jobs
  ADD COLUMN ready_plain VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NULL AND fair_key IS NULL, queue, NULL)) STORED,
  ADD COLUMN ready_limited VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NOT NULL AND fair_key IS NULL, queue, NULL)) STORED,
  ADD COLUMN ready_fair VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND fair_key IS NOT NULL, queue, NULL)) STORED,
  ADD KEY sluice_jobs_ready_plain (ready_plain, priority, id),
  ADD KEY sluice_jobs_ready_limited (ready_limited, priority, id),
  ADD KEY sluice_jobs_ready_fair (ready_fair, priority, fair_start, id);
CREATE TABLE sluice_fair_keys (
  queue VARCHAR(255) NOT NULL,
  fair_key VARCHAR(255) NOT NULL,
  finish BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, fair_key),
  KEY sluice_fair_keys_finish (queue, finish)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
