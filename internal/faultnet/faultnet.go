// Package faultnet is a TCP proxy for tests that puts a network fault
// between sluice and its database server: it cuts every connection at
// once (a server restart, a failover, a dropped link) and refuses new
// ones while the server is "down".
package faultnet

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards each connection made to its address to the target's.
// Its zero value is not usable: start one with Start.
type Proxy struct {
	t      testing.TB
	addr   string // the proxy's host:port, kept across Down and Up
	target string

	mu    sync.Mutex
	ln    net.Listener // nil while down
	conns map[net.Conn]struct{}
	dials int
	wg    sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and forwards to target
// (host:port); it is stopped, and its connections cut, when the test
// ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultnet: listen: %v", err)
	}
	p := &Proxy{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Down()
		p.wg.Wait()
	})
	return p
}

// Route starts a proxy to the server of rawURL (a postgres:// or
// mysql:// URL) and returns it with the URL rewritten to go through it.
func Route(t testing.TB, rawURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("faultnet: parse the URL: %v", err)
	}
	p := Start(t, u.Host)
	u.Host = p.addr
	return p, u.String()
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Dials counts the connections the proxy accepted.
func (p *Proxy) Dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

// Cut closes every connection now open, on both sides, as a server that
// restarts or a link that drops does; new connections are accepted.
// It returns how many it cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	return n
}

// Down cuts every connection and stops listening: a new connection is
// refused (ECONNREFUSED), as by a server that is down, until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Cut()
}

// Up listens again on the same address after Down.
func (p *Proxy) Up() {
	p.t.Helper()
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("faultnet: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			p.forward(ln, c)
		}
	}()
}

// forward connects c to the target and copies both ways until either
// side ends or the proxy cuts them.
func (p *Proxy) forward(ln net.Listener, c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln != ln { // went down meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.dials++
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer p.wg.Done()
		_, _ = io.Copy(dst, src)
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
		_ = dst.Close()
		_ = src.Close()
	}
	p.wg.Add(2)
	go pipe(s, c)
	go pipe(c, s)
}
