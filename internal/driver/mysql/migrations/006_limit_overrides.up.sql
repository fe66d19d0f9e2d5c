-- Rate-limit overrides: a limit set at run time for one budget or a whole
-- scope (a group or a kind), read by workers within seconds.
CREATE TABLE sluice_limit_overrides (
  target VARCHAR(255) NOT NULL,
  to_count INT NOT NULL,
  per_us BIGINT NOT NULL,
  burst INT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (target)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
