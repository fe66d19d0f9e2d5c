DROP TABLE sluice_recurring_runs;
