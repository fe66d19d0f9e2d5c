ALTER TABLE sluice_jobs DROP COLUMN claims;
