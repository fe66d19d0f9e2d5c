package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Virtual starts belong to a queue's priority level (fairness.md: each
// level has a virtual time of its own), so a freed slot's fair place goes
// to the lowest start of its own level, not of its priority in any queue.
// A concurrency key shared by kinds of two queues: "busy" has run 40 fair
// jobs (its level's virtual time 40 steps on), "fresh" none. The oldest
// blocked job, busy's, waits for a slot; then fresh's fair jobs block
// behind it. Compared across queues, fresh's starts (0, 1, 2 … steps) were
// all below busy's, so busy's job waited behind every job fresh blocked,
// and, fresh fed steadily, for ever.
func TestAFreedSlotDoesNotCompareFairStartsAcrossQueues(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		// Advance busy's level: 40 fair jobs run to completion.
		warm := make([]engine.NewJob, 40)
		for i := range warm {
			warm[i] = fairJob("w", 1)
			warm[i].Queue = "busy"
		}
		enqueue(t, s, t0, warm...)
		for n := 0; n < 100; n++ {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"busy"}, Max: 10, Clock: engine.At(t0), Fair: true})
			require.NoError(t, err)
			if len(res.Jobs) == 0 {
				break
			}
			require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		}

		conc := &engine.Conc{Key: "export/global", To: 1, Duration: time.Hour}
		name := map[int64]string{}
		add := func(label, queue, key string) {
			j := fairJob(key, 1)
			j.Queue, j.Conc = queue, conc
			name[enqueue(t, s, t0, j)[0]] = label
		}
		holder := job("p", "busy", 0)
		holder.Conc = conc
		name[enqueue(t, s, t0, holder)[0]] = "holder" // takes the one slot
		add("busy1", "busy", "y")                     // blocked first
		for i := range 20 {
			add("fresh"+string(rune('a'+i)), "fresh", "z")
		}
		var order []string
		for n := 0; n < 60 && len(order) < 22; n++ {
			now := at(time.Duration(n) * time.Second)
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"busy", "fresh"}, Max: 1, Clock: engine.At(now), Fair: true})
			require.NoError(t, err)
			for _, j := range res.Jobs {
				order = append(order, name[j.ID])
			}
			if len(res.Jobs) > 0 {
				require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
			}
		}
		require.Len(t, order, 22, "every job ran: %v", order)
		pos := slices.Index(order, "busy1")
		require.LessOrEqual(t, pos, 2, "the oldest blocked job (queue busy) waited behind %d jobs of queue fresh blocked after it: %v", pos-1, order)
	})
}
