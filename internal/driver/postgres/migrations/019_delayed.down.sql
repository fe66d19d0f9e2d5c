DROP INDEX sluice_jobs_delayed;
