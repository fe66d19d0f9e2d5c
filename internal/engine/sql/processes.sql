-- Workers and dispatchers.

-- name: InsertProcess
INSERT INTO sluice_processes (kind, name, hostname, pid, queues, started_at, heartbeat_at)
VALUES (:kind, :name, :hostname, :pid, :queues, :started_at, :heartbeat_at) RETURNING id;

-- name: Heartbeat
UPDATE sluice_processes SET heartbeat_at = :now WHERE id = :id;

-- name: ProcessExists
-- 1 when the process is registered: a heartbeat that changed no row may
-- have written the time already there (MySQL counts changed rows).
SELECT count(*) FROM sluice_processes WHERE id = :id;

-- name: DeleteProcess
DELETE FROM sluice_processes WHERE id = :id;

-- name: LockDeadProcesses
SELECT id FROM sluice_processes WHERE heartbeat_at < :before AND id <> :self ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: DeleteProcesses
-- The listed processes that no job still runs under: a dead process with
-- more running jobs than one reap releases (or some another transaction
-- held) keeps its row, so that the next reap finds them by it at once
-- rather than as orphans claimed long enough ago.
DELETE FROM sluice_processes WHERE id IN (:ids)
AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {RunningJob} AND {RunningProcess} = sluice_processes.id);

-- name: ListProcesses
SELECT {ProcessColumns} FROM sluice_processes ORDER BY id;
