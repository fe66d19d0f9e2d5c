ALTER TABLE sluice_fair_keys ALTER COLUMN fair_key TYPE text COLLATE "default";
ALTER TABLE sluice_semaphores ALTER COLUMN name TYPE text COLLATE "default";
ALTER TABLE sluice_budgets ALTER COLUMN name TYPE text COLLATE "default";
