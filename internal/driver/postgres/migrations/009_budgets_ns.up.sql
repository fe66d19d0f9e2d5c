-- Budget times in nanoseconds, so that a limit as fine as a million a
-- second keeps its rate: the emission interval is rounded up to the
-- nanosecond instead of the microsecond.
ALTER TABLE sluice_budgets RENAME COLUMN tat TO tat_ns;
ALTER TABLE sluice_budgets RENAME COLUMN next_slot TO next_slot_ns;
ALTER TABLE sluice_budgets RENAME COLUMN interval_us TO interval_ns;
UPDATE sluice_budgets SET tat_ns = tat_ns * 1000, next_slot_ns = next_slot_ns * 1000, interval_ns = interval_ns * 1000;
