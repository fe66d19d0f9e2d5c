-- Rate-limit overrides: a limit set at run time for one budget or a whole
-- scope (a group or a kind), read by workers within seconds.
CREATE TABLE sluice_limit_overrides (
  target TEXT PRIMARY KEY,
  to_count INTEGER NOT NULL,
  per_us INTEGER NOT NULL,
  burst INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
