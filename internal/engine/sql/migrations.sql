-- name: CreateMigrationsTable
-- The table that records applied migrations.
CREATE TABLE IF NOT EXISTS sluice_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at bigint NOT NULL);

-- name: LockMigrations
-- Serializes migrators where the database has no lock of its own for it:
-- a lock row (version 0), which a migration run's transaction inserts
-- first, which a concurrent migrator's insert waits on, and which
-- UnlockMigrations deletes before the run's transaction commits.
INSERT INTO sluice_migrations (version, name, applied_at) VALUES (0, 'lock', 0);

-- name: UnlockMigrations
DELETE FROM sluice_migrations WHERE version = 0;

-- name: AppliedMigrations
SELECT version::bigint FROM sluice_migrations WHERE version > 0 ORDER BY version;

-- name: RecordMigration
INSERT INTO sluice_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: ForgetMigration
DELETE FROM sluice_migrations WHERE version = :version;

-- name: CoalesceKeysHeldTwice
-- The jobs of the coalesce keys more than one job holds, by key: reverting
-- migration 020 makes MySQL's coalesce index unique again, which they
-- would fail (on PostgreSQL and SQLite the index is unique throughout, so
-- there are none).
SELECT j.coalesce_key, j.id FROM sluice_jobs j
JOIN (SELECT coalesce_key FROM sluice_jobs WHERE coalesce_key IS NOT NULL GROUP BY coalesce_key HAVING COUNT(*) > 1) d
  ON d.coalesce_key = j.coalesce_key
ORDER BY j.coalesce_key, j.id LIMIT :limit;
