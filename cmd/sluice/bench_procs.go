package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicequeue/sluice/cli"
)

// procs are a run's bench-worker child processes.
type procs struct {
	b    *bench
	kids []*kid
}

// kid is one child: its process, and what it last reported.
type kid struct {
	name  string
	cmd   *exec.Cmd
	stdin io.Closer
	read  chan struct{} // closed when its stdout is read to the end
	t     *tally
	last  [nKinds][3]int64 // ran, deferred, parked, as last reported
}

// startProcs starts --procs children of this binary, each running one
// worker over the run's kinds. The URL goes in the environment, not on
// the command line, where ps would show its password.
func (b *bench) startProcs() (*procs, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start workers: %w", err)
	}
	p := &procs{b: b}
	for i := 0; i < b.f.procs; i++ {
		k := &kid{name: b.workerName(), read: make(chan struct{}), t: b.t}
		args := []string{benchWorkerCmd, "--concurrency", strconv.Itoa(b.f.concurrency), "--name", k.name}
		if b.f.deleteDone {
			args = append(args, "--delete")
		}
		args = append(args, b.kc.args()...)
		k.cmd = exec.Command(self, args...)
		k.cmd.Env = append(os.Environ(), cli.EnvDatabaseURL+"="+b.f.url)
		k.cmd.Stderr = b.env.Stderr
		out, err := k.cmd.StdoutPipe()
		if err != nil {
			p.stop()
			return nil, err
		}
		// The child stops when this pipe closes: when this process ends,
		// however it ends.
		in, err := k.cmd.StdinPipe()
		if err != nil {
			p.stop()
			return nil, err
		}
		k.stdin = in
		if err := k.cmd.Start(); err != nil {
			p.stop()
			return nil, fmt.Errorf("start a worker process: %w", err)
		}
		go k.readReports(out)
		p.kids = append(p.kids, k)
	}
	return p, nil
}

func (p *procs) names() []string {
	out := make([]string, len(p.kids))
	for i, k := range p.kids {
		out[i] = k.name
	}
	return out
}

// alive returns an error when a child has already exited.
func (p *procs) alive() error {
	for _, k := range p.kids {
		select {
		case <-k.read:
			return fmt.Errorf("worker process %s exited", k.name)
		default:
		}
	}
	return nil
}

// stop sends every child SIGTERM (a graceful shutdown that writes the
// last completions), and waits for them; a child still running after 45 s
// is killed.
func (p *procs) stop() {
	for _, k := range p.kids {
		if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			_ = k.cmd.Process.Kill()
		}
	}
	deadline := time.After(45 * time.Second)
	for _, k := range p.kids {
		select {
		case <-k.read:
		case <-deadline:
			p.b.say("bench: worker process %s did not stop within 45s; killing it", k.name)
			_ = k.cmd.Process.Kill()
			<-k.read
		}
		_ = k.stdin.Close()
		if err := k.cmd.Wait(); err != nil {
			p.b.say("bench: worker process %s: %v", k.name, err)
		}
	}
	p.kids = nil
}

// readReports adds a child's reports into the run's tally:
//
//	ran KIND N          N jobs of KIND ran so far
//	def KIND N P        N deferrals of KIND so far, P of them parked
//	lat AT D            a latency job enqueued at AT (Unix ns) started D ns later
func (k *kid) readReports(out io.Reader) {
	defer close(k.read)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		n := make([]int64, len(f))
		for i := 1; i < len(f); i++ {
			n[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		switch {
		case len(f) == 3 && f[0] == "ran" && n[1] >= 0 && n[1] < int64(nKinds):
			kd := kind(n[1])
			k.t.ran[kd].Add(n[2] - k.last[kd][0])
			k.last[kd][0] = n[2]
		case len(f) == 4 && f[0] == "def" && n[1] >= 0 && n[1] < int64(nKinds):
			kd := kind(n[1])
			k.t.deferred[kd].Add(n[2] - k.last[kd][1])
			k.t.parked[kd].Add(n[3] - k.last[kd][2])
			k.last[kd][1], k.last[kd][2] = n[2], n[3]
		case len(f) == 3 && f[0] == "lat":
			k.t.addLatency(latSample{at: n[1], d: time.Duration(n[2])})
		}
	}
	_, _ = io.Copy(io.Discard, out)
}
