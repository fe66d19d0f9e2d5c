//go:build soak

package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// proc is one child slot: the process now in it, restarted after a kill.
type proc struct {
	what  string
	slot  string
	gen   int
	name  string
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
	// restarting is set from its kill to its restart.
	restarting bool
}

// soak is a run's state.
type soak struct {
	f     flags
	s     *store.Store
	l     *logger
	c     *jobs.Client
	rnd   *rand.Rand
	procs []*proc
	// restarts waits for the restarts under way.
	restarts sync.WaitGroup

	mu       sync.Mutex
	enqueued map[int64]string // job id → kind/mode
	calls    map[int64]int64  // coalesce call seq → job id
	kills    []kill
	stops    []kill // SIGSTOPs, each for DeadAfter + 2s
	seq      int64
	enqErrs  int
	alarms   []string
	findings []string
}

type kill struct {
	name string
	at   time.Time
}

func (k *soak) alarm(format string, args ...any) {
	msg := fmt.Sprintf(time.Now().Format("15:04:05.000 ")+format, args...)
	k.mu.Lock()
	k.alarms = append(k.alarms, msg)
	k.mu.Unlock()
	fmt.Println("ALARM", msg)
}

func runSoak(ctx context.Context, args []string) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.logDir, 0o755); err != nil {
		return err
	}
	s, err := store.Open(ctx, f.url)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx, 0); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	l := newLogger(s, "soak")
	if err := makeTables(ctx, l); err != nil {
		return err
	}
	reg := jobs.NewRegistry()
	if err := register(reg, nil); err != nil {
		return err
	}
	k := &soak{f: f, s: s, l: l, c: jobs.NewClient(s, reg, jobs.ClientConfig{}), rnd: rand.New(rand.NewPCG(f.seed, 1)),
		enqueued: map[int64]string{}, calls: map[int64]int64{}}
	fmt.Printf("soak: %s, seed %d, %d workers, dispatcher %v, killing for %s\n", s.Backend(), f.seed, f.workers, f.dispatcher, f.dur)
	for i := 0; i < f.workers; i++ {
		k.procs = append(k.procs, &proc{what: "worker", slot: fmt.Sprintf("w%d", i)})
	}
	if f.dispatcher {
		k.procs = append(k.procs, &proc{what: "dispatcher", slot: "d"})
	}
	for _, p := range k.procs {
		if err := k.start(p); err != nil {
			return err
		}
	}
	defer k.stopAll()

	began := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); k.enqueue(loadCtx) }()
	go func() { defer wg.Done(); k.monitor(loadCtx) }()
	k.killLoop(ctx, began.Add(f.dur))
	stopLoad()
	wg.Wait()
	fmt.Printf("soak: killing stopped after %s: %d kills, %d jobs enqueued, %d coalesce calls, %d enqueue errors\n",
		time.Since(began).Round(time.Second), len(k.kills), len(k.enqueued), len(k.calls), k.enqErrs)
	k.restarts.Wait() // every slot runs a live process for the drain
	monCtx, stopMon := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); k.monitor(monCtx) }()
	left := k.waitDrained(ctx)
	stopMon()
	wg.Wait()
	k.runCheck(ctx)
	k.stopAll()
	return k.check(ctx, left)
}

// start starts the slot's next process.
func (k *soak) start(p *proc) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	p.gen++
	p.name = fmt.Sprintf("%s.%d", p.slot, p.gen)
	p.cmd = exec.Command(self, p.what, p.name)
	p.cmd.Env = append(os.Environ(), "SOAK_URL="+k.f.url)
	logf, err := os.Create(filepath.Join(k.f.logDir, p.name+".log"))
	if err != nil {
		return err
	}
	p.cmd.Stderr = logf
	p.cmd.Stdout = logf
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return err
	}
	p.stdin = in
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}, f *os.File) {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}(p.cmd, p.done, logf)
	return nil
}

func (k *soak) stopAll() {
	for _, p := range k.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(os.Interrupt)
		}
	}
	for _, p := range k.procs {
		if p.done == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		_ = p.stdin.Close()
	}
}

// killLoop SIGKILLs a random process (sometimes two) every so often, and
// restarts it after a moment, until the deadline.
func (k *soak) killLoop(ctx context.Context, until time.Time) {
	for ctx.Err() == nil && time.Now().Before(until) {
		wait := time.Duration(float64(k.f.killEvery) * (0.5 + k.rnd.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if k.f.stops && k.rnd.Float64() < 0.15 {
			k.pause()
			continue
		}
		n := 1
		if k.rnd.Float64() < 0.15 {
			n = 2
		}
		var victims []*proc
		var dones []chan struct{}
		k.mu.Lock()
		for _, i := range k.rnd.Perm(len(k.procs))[:min(n, len(k.procs))] {
			p := k.procs[i]
			if p.restarting {
				continue // already dead
			}
			k.kills = append(k.kills, kill{name: p.name, at: time.Now()})
			_ = p.cmd.Process.Kill()
			p.restarting = true
			victims = append(victims, p)
			dones = append(dones, p.done)
			fmt.Printf("%s killed %s\n", time.Now().Format("15:04:05.000"), p.name)
		}
		k.mu.Unlock()
		for _, d := range dones {
			<-d
		}
		restart := time.Duration(k.rnd.Float64() * float64(3*time.Second))
		if k.rnd.Float64() < 0.2 {
			restart = 6 * time.Second // long enough for its heartbeat to expire
		}
		k.restarts.Add(1)
		go func(ps []*proc) {
			defer k.restarts.Done()
			time.Sleep(restart)
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, p := range ps {
				_ = p.stdin.Close()
				if err := k.start(p); err != nil {
					fmt.Println("restart:", err)
				}
				p.restarting = false
			}
		}(victims)
	}
}

// pause SIGSTOPs a worker for longer than DeadAfter, then lets it go on:
// a stopped VM, a long GC pause.
func (k *soak) pause() {
	k.mu.Lock()
	p := k.procs[k.rnd.IntN(k.f.workers)]
	if p.restarting {
		k.mu.Unlock()
		return
	}
	p.restarting = true // not killed meanwhile
	k.stops = append(k.stops, kill{name: p.name, at: time.Now()})
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	k.mu.Unlock()
	fmt.Printf("%s stopped %s\n", time.Now().Format("15:04:05.000"), p.name)
	k.restarts.Add(1)
	go func() {
		defer k.restarts.Done()
		time.Sleep(deadAfter + 2*time.Second)
		k.mu.Lock()
		defer k.mu.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.restarting = false
		fmt.Printf("%s continued %s\n", time.Now().Format("15:04:05.000"), p.name)
	}()
}

// enqueue adds the mixed load every 250ms.
func (k *soak) enqueue(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	r := rand.New(rand.NewPCG(k.f.seed, 2))
	n := func(mean float64) int { return int(mean * k.f.rate * 2 * r.Float64()) }
	mode := func() string {
		switch x := r.Float64(); {
		case x < 0.08:
			return "snooze"
		case x < 0.16:
			return "failonce"
		case x < 0.18:
			return "failalways"
		}
		return ""
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var items []jobs.Item
		var what []string
		next := func() int64 { k.seq++; return k.seq }
		for i := n(7); i > 0; i-- { // ~28/s
			m := mode()
			opts := []jobs.EnqueueOption{}
			if m == "failalways" {
				opts = append(opts, jobs.MaxAttempts(2))
			}
			if r.Float64() < 0.1 {
				opts = append(opts, jobs.Delay(time.Duration(r.IntN(2000))*time.Millisecond))
			}
			items = append(items, jobs.Item{Args: Plain{Seq: next(), Mode: m, Ms: 5 + r.IntN(25)}, Options: opts})
			what = append(what, "plain/"+m)
		}
		for i := n(14); i > 0; i-- { // ~56/s over 4 keys, in bursts
			m := mode()
			opts := []jobs.EnqueueOption{}
			if m == "failalways" {
				opts = append(opts, jobs.MaxAttempts(2))
			}
			items = append(items, jobs.Item{Args: Rated{Seq: next(), Key: fmt.Sprintf("r%d", r.IntN(4)), Mode: m}, Options: opts})
			what = append(what, "rated/"+m)
		}
		for i := n(6); i > 0; i-- { // ~24/s over 5 keys
			m := mode()
			opts := []jobs.EnqueueOption{}
			if m == "failalways" {
				opts = append(opts, jobs.MaxAttempts(2))
			}
			items = append(items, jobs.Item{Args: Conc{Seq: next(), Key: fmt.Sprintf("c%d", r.IntN(5)), Mode: m, Ms: 50 + r.IntN(251)}, Options: opts})
			what = append(what, "conc/"+m)
		}
		for i := n(2); i > 0; i-- { // ~8/s over 3 keys, under 8/s in all
			m := mode()
			opts := []jobs.EnqueueOption{}
			if m == "failalways" {
				opts = append(opts, jobs.MaxAttempts(2))
			}
			items = append(items, jobs.Item{Args: Combo{Seq: next(), Key: fmt.Sprintf("x%d", r.IntN(3)), Mode: m}, Options: opts})
			what = append(what, "combo/"+m)
		}
		r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i]; what[i], what[j] = what[j], what[i] })
		res, err := k.c.EnqueueMany(ctx, items)
		k.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				k.enqErrs++
				fmt.Println("enqueue:", err)
			}
		} else {
			for i, e := range res {
				k.enqueued[e.ID] = what[i]
			}
		}
		k.mu.Unlock()
		for i := n(5); i > 0; i-- { // ~20 calls/s over 5 keys
			c := Coal{Seq: next(), Key: fmt.Sprintf("k%d", r.IntN(5))}
			e, err := k.c.Enqueue(ctx, c)
			k.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					k.enqErrs++
					fmt.Println("enqueue coal:", err)
				}
			} else {
				k.calls[c.Seq] = e.ID
				k.enqueued[e.ID] = "coal/"
			}
			k.mu.Unlock()
		}
	}
}
