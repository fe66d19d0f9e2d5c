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

-- name: OldTicks
-- Up to :limit records of ticks before :before, except each task's latest,
-- however old: a dispatcher that catches up after a stall runs the latest
-- tick that has passed unless it finds it recorded, and a monthly task's
-- last run is weeks old; the task list shows it too. Read without a lock;
-- DeleteTick then deletes each through the primary key. (One DELETE that
-- read each task's latest itself locked every record on MySQL, whose DML
-- locks the rows its subqueries read, and a DELETE of a range waits for
-- the record past it, the latest, which dispatchers write when they
-- record a tick again: three dispatchers at the hour deadlocked with it.)
-- A record that is not its task's latest never becomes it again: ticks
-- are recorded only later. Columns: task, run_at.
SELECT r.task, r.run_at FROM sluice_recurring_runs r WHERE r.run_at < :before
AND r.run_at < (SELECT MAX(l.run_at) FROM sluice_recurring_runs l WHERE l.task = r.task)
ORDER BY r.task, r.run_at LIMIT :limit;

-- name: DeleteTick
DELETE FROM sluice_recurring_runs WHERE task = :task AND run_at = :run_at;
