-- Jobs, processes and queue pauses. Times are microseconds since the Unix
-- epoch (UTC). Names and keys compare byte for byte (utf8mb4_bin), as on
-- PostgreSQL and SQLite.
CREATE TABLE sluice_jobs (
  id BIGINT NOT NULL AUTO_INCREMENT,
  kind VARCHAR(255) NOT NULL,
  queue VARCHAR(255) NOT NULL,
  priority INT NOT NULL DEFAULT 0,
  state VARCHAR(16) NOT NULL,
  args LONGTEXT NOT NULL,
  attempt INT NOT NULL DEFAULT 0,
  max_attempts INT NOT NULL,
  created_at BIGINT NOT NULL,
  run_at BIGINT NOT NULL,
  attempted_at BIGINT NULL,
  finished_at BIGINT NULL,
  process_id BIGINT NULL,
  last_error MEDIUMTEXT NULL,
  PRIMARY KEY (id),
  KEY sluice_jobs_ready (state, queue, priority, id),
  KEY sluice_jobs_scheduled (state, run_at, id),
  KEY sluice_jobs_running (state, process_id),
  KEY sluice_jobs_finished (state, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE sluice_processes (
  id BIGINT NOT NULL AUTO_INCREMENT,
  kind VARCHAR(32) NOT NULL,
  name VARCHAR(255) NULL,
  hostname VARCHAR(255) NULL,
  pid INT NOT NULL,
  queues TEXT NULL,
  started_at BIGINT NOT NULL,
  heartbeat_at BIGINT NOT NULL,
  PRIMARY KEY (id),
  KEY sluice_processes_heartbeat (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE sluice_queues (
  name VARCHAR(255) NOT NULL,
  paused TINYINT NOT NULL DEFAULT 0,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
