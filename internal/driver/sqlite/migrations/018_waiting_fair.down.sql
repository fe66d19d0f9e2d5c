DROP INDEX sluice_jobs_blocked_fair;
DROP INDEX sluice_jobs_waiting_fair_key;
DROP INDEX sluice_jobs_waiting_fair;
