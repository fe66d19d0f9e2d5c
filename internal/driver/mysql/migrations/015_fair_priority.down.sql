DELETE k FROM sluice_fair_keys k JOIN sluice_fair_keys o
  ON o.queue = k.queue AND o.fair_key = k.fair_key AND (o.finish > k.finish OR (o.finish = k.finish AND o.priority < k.priority));
ALTER TABLE sluice_fair_keys
  DROP PRIMARY KEY,
  DROP COLUMN priority,
  ADD PRIMARY KEY (queue, fair_key),
  DROP KEY sluice_fair_keys_finish,
  ADD KEY sluice_fair_keys_finish (queue, finish);
