DROP TABLE sluice_limit_overrides;
