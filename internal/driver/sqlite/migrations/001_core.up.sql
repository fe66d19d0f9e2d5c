-- Jobs, processes and queue pauses. Times are microseconds since the Unix
-- epoch (UTC).
CREATE TABLE sluice_jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  queue TEXT NOT NULL,
  priority INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL,
  args TEXT NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  run_at INTEGER NOT NULL,
  attempted_at INTEGER,
  finished_at INTEGER,
  process_id INTEGER,
  last_error TEXT
);
CREATE INDEX sluice_jobs_ready ON sluice_jobs (queue, priority, id) WHERE state = 'ready';
CREATE INDEX sluice_jobs_scheduled ON sluice_jobs (run_at, id) WHERE state = 'scheduled';
CREATE INDEX sluice_jobs_running ON sluice_jobs (process_id) WHERE state = 'running';
CREATE INDEX sluice_jobs_finished ON sluice_jobs (finished_at) WHERE state IN ('completed', 'cancelled');
CREATE TABLE sluice_processes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  name TEXT,
  hostname TEXT,
  pid INTEGER NOT NULL,
  queues TEXT,
  started_at INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL
);
CREATE INDEX sluice_processes_heartbeat ON sluice_processes (heartbeat_at);
CREATE TABLE sluice_queues (
  name TEXT PRIMARY KEY,
  paused INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL
);
