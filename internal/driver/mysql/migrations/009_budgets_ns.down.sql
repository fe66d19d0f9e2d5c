UPDATE sluice_budgets SET tat_ns = tat_ns DIV 1000, next_slot_ns = next_slot_ns DIV 1000, interval_ns = (interval_ns + 999) DIV 1000;
ALTER TABLE sluice_budgets
  RENAME COLUMN tat_ns TO tat,
  RENAME COLUMN next_slot_ns TO next_slot,
  RENAME COLUMN interval_ns TO interval_us;
