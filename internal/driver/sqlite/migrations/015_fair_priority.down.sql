CREATE TABLE sluice_fair_keys_015 (
  queue TEXT NOT NULL,
  fair_key TEXT NOT NULL,
  finish INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, fair_key)
);
INSERT INTO sluice_fair_keys_015 (queue, fair_key, finish)
SELECT queue, fair_key, MAX(finish) FROM sluice_fair_keys GROUP BY queue, fair_key;
DROP TABLE sluice_fair_keys;
ALTER TABLE sluice_fair_keys_015 RENAME TO sluice_fair_keys;
CREATE INDEX sluice_fair_keys_finish ON sluice_fair_keys (queue, finish);
