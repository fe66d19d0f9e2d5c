package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Process describes a worker or dispatcher when it registers.
type Process struct {
	Kind     string // "worker" or "dispatcher"
	Name     string
	Hostname string
	PID      int
	Queues   string
}

// LostError is recorded on a job whose process stopped heartbeating while
// it ran.
const LostError = "process lost: its heartbeat expired while the job ran"

// RegisterProcess records a live process and returns its id. Its start
// and first heartbeat are stamped on c's time: the database's with
// DatabaseTime, the clock every process's heartbeat is then compared with.
func (s *Store) RegisterProcess(ctx context.Context, p Process, c Clock) (int64, error) {
	now, err := s.now(ctx, s.db, c)
	if err != nil {
		return 0, s.wrap(fmt.Errorf("register process: %w", err))
	}
	row := ProcessRow{Kind: p.Kind, Name: p.Name, Hostname: p.Hostname, PID: p.PID, Queues: p.Queues, StartedAt: Micros(now), HeartbeatAt: Micros(now)}
	q, args := s.q.InsertProcess(row)
	if s.q.c.Returning {
		ids, err := s.queryAlone(ctx, q, args)
		if err != nil {
			return 0, s.wrap(fmt.Errorf("register process: %w", err))
		}
		if len(ids) != 1 {
			return 0, fmt.Errorf("register process: got %d ids back", len(ids))
		}
		return ids[0], nil
	}
	res, err := s.execAlone(ctx, q, args)
	if err != nil {
		return 0, s.wrap(fmt.Errorf("register process: %w", err))
	}
	return res.LastInsertID, nil
}

// Heartbeat stamps a process as alive, on c's time. It reports false when
// the process is no longer registered: another process found it dead and
// released its jobs, so it must register again.
func (s *Store) Heartbeat(ctx context.Context, id int64, c Clock) (bool, error) {
	now, err := s.now(ctx, s.db, c)
	if err != nil {
		return false, s.wrap(fmt.Errorf("heartbeat: %w", err))
	}
	q, args := s.q.Heartbeat(id, Micros(now))
	res, err := s.execAlone(ctx, q, args)
	if err != nil {
		return false, s.wrap(fmt.Errorf("heartbeat: %w", err))
	}
	if res.RowsAffected > 0 {
		return true, nil
	}
	// MySQL counts the rows an update changed, not those it found: a beat
	// at the instant of the last (a coarse or fake clock) changes none.
	q, args = s.q.ProcessExists(id)
	n, err := queryInt64s(ctx, s.db, q, args)
	if err != nil {
		return false, s.wrap(fmt.Errorf("heartbeat: %w", err))
	}
	return len(n) == 1 && n[0] > 0, nil
}

// DeregisterProcess removes a process that stopped cleanly.
func (s *Store) DeregisterProcess(ctx context.Context, id int64) error {
	q, args := s.q.DeleteProcess(id)
	if _, err := s.execAlone(ctx, q, args); err != nil {
		return s.wrap(fmt.Errorf("deregister process: %w", err))
	}
	return nil
}

// ReapDeadProcesses finds processes whose heartbeat is older than
// threshold, releases the jobs they were running back to ready (the lost
// run counts as an attempt, and is kept as a failed one with LostError; a
// job with none left fails), and removes them once none of their jobs
// runs: one call releases at most 1000 jobs, and the next finds the rest
// by the process's row.
// A released job keeps its concurrency slot; one that lost it when its key
// expired takes a free one, or is blocked.
// It waits for no lock that another transaction holds (a process's
// heartbeat loop reaps, and must not stop for long): it skips the
// processes and jobs another transaction holds, and the semaphores
// (settleUnwaiting), leaving a job that fails for good while holding a
// slot of a key whose semaphore another transaction holds to a later reap.
// Running jobs whose process row is gone are released the same way once
// they were claimed more than threshold ago: a reaped process that comes
// back may claim before it learns it was reaped, and runs what it claimed.
// It returns how many jobs it released or failed.
func (s *Store) ReapDeadProcesses(ctx context.Context, c Clock, threshold time.Duration) (int, error) {
	return s.ReapDeadProcessesBut(ctx, c, threshold, 0)
}

// ReapDeadProcessesBut is ReapDeadProcesses that never takes the process
// self: the one whose heartbeat loop reaps, which has just stamped its
// row and is alive whatever its stamp reads against the time the reap
// reads after it (a clock that jumped, a host that stalled between the
// two statements for longer than threshold), and would otherwise release
// the jobs it runs.
func (s *Store) ReapDeadProcessesBut(ctx context.Context, c Clock, threshold time.Duration, self int64) (int, error) {
	released := 0
	var queues, woke []string
	err := s.inTx(ctx, func(tx Tx) error {
		released, queues, woke = 0, nil, nil
		now, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		nowUS := Micros(now)
		q, args := s.q.LockDeadProcesses(Micros(now.Add(-threshold)), self, 100)
		dead, err := queryInt64s(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find dead processes: %w", err)
		}
		q, args = s.q.LockOrphans(dead, Micros(now.Add(-threshold)), 1000)
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("find lost jobs: %w", err)
		}
		var ts []Transition
		var inQueue []string
		// A job that fails for good gives its slot back; one released
		// keeps it, and one whose key expired while it ran, so that it
		// holds none, takes a free one or is blocked (settleUnwaiting).
		gives := holders{}
		var back []slotless
		for rows.Next() {
			var id int64
			var queue string
			var attempt, maxAttempts, concLimit int
			var concKey nullString
			var holdsSlot bool
			var concDuration int64
			if err := rows.Scan(&id, &queue, &attempt, &maxAttempts, &concKey, &holdsSlot, &concLimit, &concDuration); err != nil {
				rows.Close()
				return err
			}
			t := Transition{ID: id, State: StateReady, RunAt: now, Error: LostError}
			switch {
			case attempt >= maxAttempts:
				t = Transition{ID: id, State: StateFailed, Error: LostError, Finished: true}
				if holdsSlot {
					gives[id] = concKey.String
				}
			case concKey.Valid && !holdsSlot:
				c := &Conc{Key: concKey.String, To: concLimit, Duration: time.Duration(concDuration) * time.Microsecond}
				back = append(back, slotless{id: id, queue: queue, conc: c})
			}
			ts, inQueue = append(ts, t), append(inQueue, queue)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// The reap waits for no semaphore: a process's heartbeat loop
		// reaps the others, and a reap that waited for a lock held
		// elsewhere would stop its heartbeats, and its process would be
		// presumed dead in turn. Holders of the semaphores it cannot lock
		// at once are left for a later reap.
		stmts, instead, left, handed, err := s.settleUnwaiting(ctx, tx, At(now), gives, back)
		if err != nil {
			return err
		}
		woke = handed
		if len(left) > 0 {
			kept := 0
			for i, t := range ts {
				if !left[t.ID] {
					ts[kept], inQueue[kept] = t, inQueue[i]
					kept++
				}
			}
			ts, inQueue = ts[:kept], inQueue[:kept]
		}
		ts = block(ts, instead)
		for i := range ts {
			if ts[i].State == StateReady && !slices.Contains(queues, inQueue[i]) {
				queues = append(queues, inQueue[i])
			}
		}
		if err := s.transition(ctx, tx, StateRunning, 0, nowUS, ts); err != nil {
			return err
		}
		released = len(ts)
		if err := s.notify(ctx, tx, queues); err != nil {
			return err
		}
		if len(ts) > 0 {
			// Each lost run is a failed attempt, kept with its error as a
			// handler's failure is.
			ids := make([]int64, len(ts))
			for i, t := range ts {
				ids[i] = t.ID
			}
			stmts = append(stmts, stmt(s.q.RecordAttempts(ids, nowUS)))
		}
		if err := pipeline(ctx, tx, stmts, nil); err != nil {
			return err
		}
		if len(dead) > 0 {
			q, args := s.q.DeleteProcesses(dead)
			if _, err := exec(ctx, tx, q, args); err != nil {
				return fmt.Errorf("remove dead processes: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, s.wrap(fmt.Errorf("reap dead processes: %w", err))
	}
	s.Wake(append(queues, woke...)...)
	return released, nil
}

// ListProcesses returns the registered processes.
func (s *Store) ListProcesses(ctx context.Context) ([]ProcessRow, error) {
	rows, err := s.db.Query(ctx, s.q.ListProcesses())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("list processes: %w", err))
	}
	defer rows.Close()
	var out []ProcessRow
	for rows.Next() {
		var p ProcessRow
		var name, host, queues nullString
		if err := rows.Scan(&p.ID, &p.Kind, &name, &host, &p.PID, &queues, &p.StartedAt, &p.HeartbeatAt); err != nil {
			return nil, err
		}
		p.Name, p.Hostname, p.Queues = name.String, host.String, queues.String
		out = append(out, p)
	}
	return out, rows.Err()
}
