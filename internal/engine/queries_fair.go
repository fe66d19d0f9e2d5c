package engine

// LockReadyFair selects (and locks, skipping locked rows) up to limit
// ready fair jobs of one queue, by priority, virtual start and id, unless
// the queue is paused; without limited, only those that carry no
// rate-limit key. Columns: JobColumns.
func (q *SQL) LockReadyFair(queue string, limited bool, limit int) (string, []any) {
	return q.lockReadyFair.bind(queue, limited, limit)
}

// InsertFairKeys inserts rows for the fairness keys (sorted) of a
// queue's priority level, ignoring those that exist.
func (q *SQL) InsertFairKeys(queue string, priority int, keys []string) (string, []any) {
	queues, prios := make([]string, len(keys)), make([]int32, len(keys))
	for i := range queues {
		queues[i], prios[i] = queue, int32(priority)
	}
	return q.insertFairKeys.bind(columns{queues, prios, keys})
}

// LockFairKeys locks the fairness keys of a queue's priority level, in key
// order. Columns: fair_key, finish.
func (q *SQL) LockFairKeys(queue string, priority int, keys []string) (string, []any) {
	return q.lockFairKeys.bind(queue, int32(priority), keys)
}

// fairServedKeys is how many of a level's keys, latest finish first, its
// virtual time looks at for one with no job waiting, when none of its fair
// jobs is ready: each costs one probe of the index of waiting fair jobs.
const fairServedKeys = 16

// FairVirtualTime reads the virtual time of a queue's priority level: the
// start of its first ready fair job or, with none ready, the lower of the
// lowest start of its waiting fair jobs (FairPruneBound) and the latest
// finish of its keys, raised to the latest finish of the keys with no job
// waiting among the fairServedKeys keys with the latest finishes (0 for a new
// level). Columns: one bigint.
func (q *SQL) FairVirtualTime(queue string, priority int) (string, []any) {
	return q.fairVirtualTime.bind(queue, int32(priority), fairServedKeys)
}

// FairPruneBound reads, in one statement, the virtual time of a queue's
// priority level (as FairVirtualTime), the lowest start of its fair jobs
// that wait to be ready (scheduled: delayed, or deferred by a rate limit;
// parked or blocked) and the finish of the fairServedKeys-th latest of its
// keys, the last the virtual time looks at. Columns: three bigints, the
// second NULL when none waits, the third with fewer keys.
func (q *SQL) FairPruneBound(queue string, priority int) (string, []any) {
	return q.fairPruneBound.bind(queue, int32(priority), fairServedKeys, fairServedKeys-1)
}

// LockFairAnchor locks, without waiting, the key of a queue's priority
// level with the latest finish among those no other transaction holds.
// Columns: fair_key, finish.
func (q *SQL) LockFairAnchor(queue string, priority int) (string, []any) {
	return q.lockFairAnchor.bind(queue, int32(priority))
}

// LockPrunableFairKeys locks, without waiting, up to limit keys of a
// queue's priority level after after, in the primary key's order, whose
// last finish is at most through, leaving out anchor. Columns: fair_key.
func (q *SQL) LockPrunableFairKeys(queue string, priority int, after string, through int64, anchor string, limit int) (string, []any) {
	return q.lockPrunableFairKeys.bind(queue, int32(priority), after, through, anchor, limit)
}

// ReadPrunableFairKeys reads the columns of FairPruneBound beside each of
// keys, keys of a queue's priority level, with its finish and whether a
// fair job of the key at that level waits to be ready, in one statement.
// Columns: the three of FairPruneBound, fair_key, finish, waiting (0 or
// 1).
func (q *SQL) ReadPrunableFairKeys(queue string, priority int, keys []string) (string, []any) {
	return q.readPrunableFairKeys.bind(queue, int32(priority), fairServedKeys, fairServedKeys-1, keys)
}

// SaveFairKeys writes the last finish of the keys of a queue's priority
// level.
func (q *SQL) SaveFairKeys(queue string, priority int, keys []string, finish []int64) (string, []any) {
	queues, prios := make([]string, len(keys)), make([]int32, len(keys))
	for i := range queues {
		queues[i], prios[i] = queue, int32(priority)
	}
	return q.saveFairKeys.bind(columns{queues, prios, keys, finish})
}

// FairLevels lists the priority levels of each queue that have fairness
// keys. Columns: queue, priority.
func (q *SQL) FairLevels() string { return q.fairLevels }

// DeleteFairKeys deletes keys, keys of a queue's priority level that the
// transaction locked.
func (q *SQL) DeleteFairKeys(queue string, priority int, keys []string) (string, []any) {
	return q.deleteFairKeys.bind(queue, int32(priority), keys)
}

// RefundFairKeys gives back the charge of fair jobs cancelled before any
// claim to the keys (sorted) of a queue's priority level: ids holds, for
// each key, its cancelled job with the lowest start (C), in any order.
// A key's finish becomes C where it is later and the key has no job of
// the level ready, waiting or running that starts at C or after.
func (q *SQL) RefundFairKeys(queue string, priority int, keys []string, ids []int64) (string, []any) {
	return q.refundFairKeys.bind(ids, queue, int32(priority), keys)
}
