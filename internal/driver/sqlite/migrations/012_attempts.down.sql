DROP TABLE sluice_attempts;
