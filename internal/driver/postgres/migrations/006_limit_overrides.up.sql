-- Rate-limit overrides: a limit set at run time for one budget or a whole
-- scope (a group or a kind), read by workers within seconds.
CREATE TABLE sluice_limit_overrides (
  target text PRIMARY KEY,
  to_count integer NOT NULL,
  per_us bigint NOT NULL,
  burst integer NOT NULL,
  updated_at bigint NOT NULL
);
