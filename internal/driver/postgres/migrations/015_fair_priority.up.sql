-- Fair shares per priority (docs/fairness.md). Each priority level of a
-- queue has a virtual time of its own, and a key's last finish is kept per
-- level, so a more urgent level's starts never push a less urgent one's.
-- Each key's finish is copied to every priority its queue has fair jobs
-- at, so the keys' next starts are what they were.
ALTER TABLE sluice_fair_keys ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE sluice_fair_keys DROP CONSTRAINT sluice_fair_keys_pkey, ADD PRIMARY KEY (queue, priority, fair_key);
DROP INDEX sluice_fair_keys_finish;
CREATE INDEX sluice_fair_keys_finish ON sluice_fair_keys (queue, priority, finish);
INSERT INTO sluice_fair_keys (queue, priority, fair_key, finish)
SELECT k.queue, p.priority, k.fair_key, k.finish
FROM sluice_fair_keys k JOIN (SELECT DISTINCT queue, priority FROM sluice_jobs WHERE fair_key IS NOT NULL AND priority <> 0) p ON p.queue = k.queue;
