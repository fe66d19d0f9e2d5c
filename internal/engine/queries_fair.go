package engine

// LockReadyFair selects (and locks, skipping locked rows) up to limit
// ready fair jobs of one queue, by priority, virtual start and id, unless
// the queue is paused; without limited, only those that carry no
// rate-limit key. Columns: JobColumns.
func (q *SQL) LockReadyFair(queue string, limited bool, limit int) (string, []any) {
	return q.lockReadyFair.bind(queue, limited, limit)
}

// InsertFairKeys inserts rows for a queue's fairness keys (sorted),
// ignoring those that exist.
func (q *SQL) InsertFairKeys(queue string, keys []string) (string, []any) {
	queues := make([]string, len(keys))
	for i := range queues {
		queues[i] = queue
	}
	return q.insertFairKeys.bind(columns{queues, keys})
}

// LockFairKeys locks a queue's fairness keys, in key order. Columns:
// fair_key, finish.
func (q *SQL) LockFairKeys(queue string, keys []string) (string, []any) {
	return q.lockFairKeys.bind(queue, keys)
}

// FairVirtualTime reads a queue's virtual time. Columns: one bigint.
func (q *SQL) FairVirtualTime(queue string) (string, []any) { return q.fairVirtualTime.bind(queue) }

// SaveFairKeys writes the last finish of a queue's keys.
func (q *SQL) SaveFairKeys(queue string, keys []string, finish []int64) (string, []any) {
	queues := make([]string, len(keys))
	for i := range queues {
		queues[i] = queue
	}
	return q.saveFairKeys.bind(columns{queues, keys, finish})
}

// FairQueues lists the queues that have fairness keys. Columns: queue.
func (q *SQL) FairQueues() string { return q.fairQueues }

// DeleteFairKeys deletes a queue's keys whose last finish is before
// before.
func (q *SQL) DeleteFairKeys(queue string, before int64) (string, []any) {
	return q.deleteFairKeys.bind(queue, before)
}
