package testenv

import (
	"io"
	"net"
	"regexp"
	"sync"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy on a loopback port in front of a real server
// (MinIO, an etcd member), for the fault matrix. It forwards bytes both ways
// and can:
//
//   - blackhole: accept connections and never answer nor forward (a server
//     that accepts TCP and never speaks, TLS or HTTP);
//   - hold: stop a connection's client-to-server bytes, before they are
//     forwarded, when they contain a given string (an HTTP request line such
//     as "PUT /bucket/p/manifest.json"), until the test releases or drops it;
//   - record the HTTP request lines it forwards (plain-HTTP S3), so a test
//     knows the exact keys a run touched;
//   - trickle: forward at most a few bytes per interval, in either
//     direction or both (a store that never goes silent yet moves almost
//     nothing), on open connections as well as new ones.
//
// It never reads or changes the bytes otherwise: TLS passes through.
type FaultProxy struct {
	Addr   string // 127.0.0.1:port
	target string

	ln    net.Listener
	conns connSet

	mu        sync.Mutex
	blackhole bool
	trickle   [2]trickleRate // by Direction
	holds     []*ProxyHold
	allHolds  []*ProxyHold
	requests  []string
	accepted  int
	upstreams int           // open connections to the target
	changed   chan struct{} // closed and replaced on every state change
}

// Direction is a direction of a FaultProxy's traffic.
type Direction int

const (
	ToServer Direction = iota // client to server: uploads, requests
	ToClient                  // server to client: downloads, answers
)

// trickleRate is Bytes every Every; zero is full speed.
type trickleRate struct {
	Bytes int
	Every time.Duration
}

// SetTrickle makes the proxy forward at most n bytes every interval in
// direction d, on every connection, open or new (n = 0: full speed
// again). Bytes are never dropped or reordered, only held back.
func (p *FaultProxy) SetTrickle(d Direction, n int, every time.Duration) {
	p.mu.Lock()
	p.trickle[d] = trickleRate{Bytes: n, Every: every}
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *FaultProxy) trickleOf(d Direction) trickleRate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trickle[d]
}

// forward writes b to w, at the direction's trickle rate when one is set.
func (p *FaultProxy) forward(w net.Conn, d Direction, b []byte) error {
	for len(b) > 0 {
		r := p.trickleOf(d)
		if r.Bytes <= 0 {
			_, err := w.Write(b)
			return err
		}
		n := min(r.Bytes, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		time.Sleep(r.Every)
	}
	return nil
}

// ProxyHold is one hold rule: the first client-to-server chunk matching
// Match stops that connection (the chunk is not forwarded) until Release
// (forward it and go on) or Drop (close the connection, the chunk unsent).
type ProxyHold struct {
	Match *regexp.Regexp

	hit      chan struct{} // closed when a chunk matched
	decided  chan struct{} // closed by Release or Drop
	once     sync.Once
	hitOnce  sync.Once
	drop     bool
	HitChunk []byte
}

// Hit is closed when the rule has matched and the connection is held.
func (h *ProxyHold) Hit() <-chan struct{} { return h.hit }

// Release forwards the held chunk and lets the connection go on.
func (h *ProxyHold) Release() { h.once.Do(func() { close(h.decided) }) }

// Drop closes the held connection without forwarding the held chunk.
func (h *ProxyHold) Drop() {
	h.once.Do(func() { h.drop = true; close(h.decided) })
}

// StartFaultProxy starts a proxy to target (host:port). It is closed when
// tb's test ends (held connections are dropped).
func StartFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	ln := listenLoopback(tb, "fault proxy")
	p := &FaultProxy{Addr: ln.Addr().String(), target: target, ln: ln, changed: make(chan struct{})}
	go p.serve()
	tb.Cleanup(p.Close)
	return p
}

// StartBlackhole starts a listener that accepts TCP connections and never
// sends a byte.
func StartBlackhole(tb testing.TB) *FaultProxy {
	tb.Helper()
	p := StartFaultProxy(tb, "127.0.0.1:1") // never dialled
	p.SetBlackhole(true)
	return p
}

// URL is scheme://Addr.
func (p *FaultProxy) URL(scheme string) string { return scheme + "://" + p.Addr }

// SetBlackhole switches blackholing of new connections on or off.
func (p *FaultProxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// Hold adds a hold rule (a regular expression over the client's bytes, for
// plain HTTP: its request lines); each rule matches once.
func (p *FaultProxy) Hold(match *regexp.Regexp) *ProxyHold {
	h := &ProxyHold{Match: match, hit: make(chan struct{}), decided: make(chan struct{})}
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.allHolds = append(p.allHolds, h)
	p.mu.Unlock()
	return h
}

// Accepted is the number of connections accepted so far.
func (p *FaultProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Upstreams is the number of open connections to the target.
func (p *FaultProxy) Upstreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstreams
}

// WaitFor waits until cond (called under no lock) is true or timeout passes;
// it is re-evaluated on every state change of the proxy and every 50 ms.
func (p *FaultProxy) WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-ch:
		case <-time.After(min(left, 50*time.Millisecond)):
		}
	}
}

var requestLine = regexp.MustCompile(`(?:GET|PUT|POST|DELETE|HEAD) /[^ \r\n]* HTTP/1\.[01]`)

// Requests returns the HTTP request lines seen so far (plain HTTP only).
func (p *FaultProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// Close stops the listener and closes every connection; held ones are dropped.
func (p *FaultProxy) Close() {
	if !p.conns.close() {
		return
	}
	p.mu.Lock()
	holds := p.allHolds
	p.mu.Unlock()
	p.ln.Close()
	for _, h := range holds {
		h.Drop()
	}
}

func (p *FaultProxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *FaultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		bh := p.blackhole
		p.notifyLocked()
		p.mu.Unlock()
		if !p.conns.track(c, true) {
			continue
		}
		if bh {
			go func() { // read and discard until the client goes away
				_, _ = io.Copy(io.Discard, c)
				c.Close()
				p.conns.track(c, false)
			}()
			continue
		}
		go p.pipe(c)
	}
}

func (p *FaultProxy) pipe(client net.Conn) {
	defer p.conns.track(client, false)
	defer client.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return // the client sees the connection closed: as a dead server
	}
	if !p.conns.track(up, true) {
		return
	}
	p.mu.Lock()
	p.upstreams++
	p.notifyLocked()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { // server -> client
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 && p.forward(client, ToClient, buf[:n]) != nil {
				break
			}
			if err != nil {
				break
			}
		}
		client.Close()
		close(done)
	}()
	p.clientToServer(client, up)
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.CloseWrite() // the server still answers what it has read
	}
	<-done
	up.Close()
	p.conns.track(up, false)
	p.mu.Lock()
	p.upstreams--
	p.notifyLocked()
	p.mu.Unlock()
}

func (p *FaultProxy) clientToServer(client, up net.Conn) {
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous chunk, for matches across chunks
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			scan := append(append([]byte(nil), tail...), chunk...)
			p.mu.Lock()
			for _, m := range requestLine.FindAll(chunk, -1) {
				p.requests = append(p.requests, string(m))
			}
			var held *ProxyHold
			for i, h := range p.holds {
				if h.Match.Match(scan) {
					held = h
					p.holds = append(p.holds[:i:i], p.holds[i+1:]...)
					break
				}
			}
			p.notifyLocked()
			p.mu.Unlock()
			if held != nil {
				held.HitChunk = append([]byte(nil), chunk...)
				held.hitOnce.Do(func() { close(held.hit) })
				<-held.decided
				if held.drop {
					client.Close()
					return
				}
			}
			if p.forward(up, ToServer, chunk) != nil {
				return
			}
			if len(scan) > 256 {
				tail = append(tail[:0], scan[len(scan)-256:]...)
			} else {
				tail = append(tail[:0], scan...)
			}
		}
		if err != nil {
			return // EOF, or closed: the caller half-closes the upstream
		}
	}
}
