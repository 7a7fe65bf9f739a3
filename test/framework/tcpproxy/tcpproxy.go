// Package tcpproxy is a TCP proxy for tests that put a network fault between
// a client and a server: Freeze stops every byte in both directions without
// an error (a partition the client notices only through its own timeouts),
// Cut resets every connection and refuses new ones (an outage the client
// notices at once).
package tcpproxy

import (
	"net"
	"sync"
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	// Addr is the address the proxy listens on.
	Addr string

	l      net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	cut    bool
	thaw   chan struct{} // closed when a freeze ends
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	closed bool
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: l.Addr().String(), l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// track registers a connection; false while cut or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	defer server.Close()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client) })
	wg.Go(func() { p.pipe(client, server) })
	wg.Wait()
}

// pipe copies src to dst, holding every chunk while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitThaw()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) waitThaw() {
	p.mu.Lock()
	if !p.frozen {
		p.mu.Unlock()
		return
	}
	thaw := p.thaw
	p.mu.Unlock()
	<-thaw
}

// Freeze holds every byte, of open connections and of new ones, until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thaw = true, make(chan struct{})
	}
}

// Thaw ends a freeze: the bytes held are delivered.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// Cut closes every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore accepts connections again after a Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Close stops the proxy and every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.Thaw()
	_ = p.l.Close()
	p.wg.Wait()
}
