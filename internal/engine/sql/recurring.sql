-- Recurring tasks: one record per tick, so a tick enqueues once across
-- dispatchers.

-- name: InsertTick
INSERT INTO sluice_recurring_runs (task, run_at, ran_at) VALUES (:task, :run_at, :now) ON CONFLICT (task, run_at) DO NOTHING;

-- name: SetTickJob
UPDATE sluice_recurring_runs SET job_id = :job_id WHERE task = :task AND run_at = :run_at;

-- name: LastTicks
SELECT r.task, r.run_at, r.ran_at, r.job_id FROM sluice_recurring_runs r
JOIN (SELECT task, MAX(run_at) AS run_at FROM sluice_recurring_runs GROUP BY task) l ON l.task = r.task AND l.run_at = r.run_at
ORDER BY r.task;

-- name: DeleteTicks
-- The records of ticks before :before, except each task's latest, however
-- old: a dispatcher that catches up after a stall runs the latest tick
-- that has passed unless it finds it recorded, and a monthly task's last
-- run is weeks old; the task list shows it too. The subquery reads the
-- primary key (task, run_at) backwards, one entry per row deleted.
DELETE FROM sluice_recurring_runs WHERE run_at < :before
AND run_at < (SELECT MAX(l.run_at) FROM sluice_recurring_runs l WHERE l.task = sluice_recurring_runs.task);
