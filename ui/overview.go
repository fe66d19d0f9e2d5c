package ui

import (
	"errors"
	"html/template"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// Throughput is charted over this window, in buckets of this width.
const (
	throughputWindow = 5 * time.Minute
	throughputBucket = 10 * time.Second
)

// waitingStates are the states the overview counts (finished jobs are
// not counted: their number only grows).
var waitingStates = []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked, engine.StateRunning, engine.StateFailed}

type stateCount struct {
	State engine.State
	N     int64
}

type queueRow struct {
	Name   string
	Paused bool
	Counts []stateCount
	// OldestHeld and OldestFree are the creation times of the oldest job
	// a limit holds and of the oldest one no limit holds.
	OldestHeld, OldestFree time.Time
	// CompletedPerSec and FailedPerSec are over the last minute; cancelled
	// jobs count in neither.
	CompletedPerSec, FailedPerSec float64
	Chart                         template.HTML
}

type processRow struct {
	engine.ProcessRow
	Heartbeat time.Time
	Age       time.Duration
}

type overviewData struct {
	States    []engine.State
	Queues    []*queueRow
	Processes []processRow
	Window    time.Duration
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := s.opts.Now()
	// The figures come from independent reads, run at once: the page
	// takes as long as the slowest, not their sum.
	var (
		queues []engine.QueueInfo
		depth  []engine.QueueStats
		oldest []engine.Oldest
		fin    []engine.Finished
		procs  []engine.ProcessRow
	)
	err := parallel(
		func() (err error) { queues, err = s.store.PausedQueues(ctx); return err },
		func() (err error) { depth, err = s.store.Depth(ctx); return err },
		func() (err error) { oldest, err = s.store.OldestWaiting(ctx); return err },
		func() (err error) {
			fin, err = s.store.FinishedSince(ctx, now.Add(-throughputWindow), throughputBucket)
			return err
		},
		func() (err error) { procs, err = s.store.ListProcesses(ctx); return err },
	)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	byName := map[string]*queueRow{}
	d := &overviewData{States: waitingStates, Window: throughputWindow}
	row := func(name string) *queueRow {
		q := byName[name]
		if q == nil {
			q = &queueRow{Name: name}
			byName[name] = q
			d.Queues = append(d.Queues, q)
		}
		return q
	}
	for _, q := range queues {
		row(q.Name).Paused = q.Paused
	}
	for _, qs := range depth {
		q := row(qs.Queue)
		for _, st := range waitingStates {
			q.Counts = append(q.Counts, stateCount{st, qs.Counts[st]})
		}
	}
	for _, o := range oldest {
		if o.Since.After(now) {
			continue // a delayed job not due yet: not waiting to run
		}
		if o.Throttled {
			row(o.Queue).OldestHeld = o.Since
		} else {
			row(o.Queue).OldestFree = o.Since
		}
	}
	buckets := int(throughputWindow / throughputBucket)
	start := now.Add(-throughputWindow).Truncate(throughputBucket)
	series := map[string]*[2][]float64{}
	for _, f := range fin {
		q := row(f.Queue)
		sr := series[q.Name]
		if sr == nil {
			sr = &[2][]float64{make([]float64, buckets+1), make([]float64, buckets+1)}
			series[q.Name] = sr
		}
		i := int(f.At.Sub(start) / throughputBucket)
		if i < 0 || i > buckets {
			continue
		}
		var k int
		switch f.State {
		case engine.StateCompleted:
			k = 0
		case engine.StateFailed:
			k = 1
		default:
			continue // cancelled: neither completed nor failed, and most never ran
		}
		sr[k][i] += float64(f.Count) / throughputBucket.Seconds()
		if !f.At.Before(now.Add(-time.Minute)) {
			if k == 0 {
				q.CompletedPerSec += float64(f.Count) / 60
			} else {
				q.FailedPerSec += float64(f.Count) / 60
			}
		}
	}
	sort.Slice(d.Queues, func(i, j int) bool { return d.Queues[i].Name < d.Queues[j].Name })
	for _, q := range d.Queues {
		if len(q.Counts) == 0 {
			for _, st := range waitingStates {
				q.Counts = append(q.Counts, stateCount{st, 0})
			}
		}
		sr := series[q.Name]
		if sr == nil {
			sr = &[2][]float64{make([]float64, buckets+1), make([]float64, buckets+1)}
		}
		q.Chart = lineChart(260, 48, []chartSeries{{Class: "completed", Values: sr[0]}, {Class: "failed", Values: sr[1]}}, -1)
	}
	for _, p := range procs {
		hb := engine.FromMicros(p.HeartbeatAt)
		d.Processes = append(d.Processes, processRow{ProcessRow: p, Heartbeat: hb, Age: now.Sub(hb).Round(time.Millisecond)})
	}
	s.render(w, r, "overview", "Overview", d)
}

// parallel runs fns at once and, once all have returned, their errors
// joined.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
