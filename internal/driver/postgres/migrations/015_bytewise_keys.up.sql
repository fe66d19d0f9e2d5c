-- Keys compare and sort bytewise, as sluice sorts the keys a transaction
-- locks (and as MySQL's utf8mb4_bin and SQLite's BINARY columns do). Under
-- a linguistic default collation (en_US.UTF-8 and the like) "k_a" sorts
-- before "k/b" in the database and after it in Go, so a transaction that
-- locked some keys in one statement and the next in another could wait out
-- of the order every other transaction locks them in, and deadlock.
ALTER TABLE sluice_budgets ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE sluice_semaphores ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE sluice_fair_keys ALTER COLUMN fair_key TYPE text COLLATE "C";
