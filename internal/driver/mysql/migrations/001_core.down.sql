DROP TABLE sluice_queues;
DROP TABLE sluice_processes;
DROP TABLE sluice_jobs;
