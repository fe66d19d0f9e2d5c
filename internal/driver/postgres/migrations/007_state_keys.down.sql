DROP INDEX sluice_jobs_failed;
