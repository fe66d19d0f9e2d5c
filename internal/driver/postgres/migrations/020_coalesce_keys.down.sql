DROP TABLE sluice_coalesce_keys;
