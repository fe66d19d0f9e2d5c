DELETE FROM sluice_fair_keys k USING sluice_fair_keys o
WHERE o.queue = k.queue AND o.fair_key = k.fair_key AND (o.finish > k.finish OR (o.finish = k.finish AND o.priority < k.priority));
ALTER TABLE sluice_fair_keys DROP CONSTRAINT sluice_fair_keys_pkey, ADD PRIMARY KEY (queue, fair_key);
DROP INDEX sluice_fair_keys_finish;
ALTER TABLE sluice_fair_keys DROP COLUMN priority;
CREATE INDEX sluice_fair_keys_finish ON sluice_fair_keys (queue, finish);
