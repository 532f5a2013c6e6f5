package testenv

import (
	"net"
	"sync"
	"testing"
	"time"
)

// LinkProxy is a TCP proxy on a loopback port that shapes the traffic to a
// real server as a long link does: every byte is delayed by half the
// round-trip time in each direction, and each direction carries at most
// its bandwidth, shared by every connection (a chunk waits for the link to
// finish sending what is ahead of it, then for the propagation delay).
// Unlike FaultProxy's trickle, which holds each connection's bytes back
// in turn, the link is pipelined: many bytes are in flight at once, so a
// transfer's time is its size over the bandwidth plus the round trips it
// needs, as on a WAN. Bytes are never dropped or reordered.
type LinkProxy struct {
	Addr   string // 127.0.0.1:port
	target string
	delay  time.Duration // one way: RTT/2
	bps    float64       // bytes per second a direction; 0: unlimited
	ln     net.Listener

	conns connSet

	mu    sync.Mutex
	free  [2]time.Time // by Direction: when the link is free to send again
	moved [2]int64     // bytes forwarded, by Direction
}

// StartLinkProxy starts a shaped link to target (host:port) with the given
// round-trip time and bandwidth in bits per second each way (0: no
// bandwidth limit). It is closed when tb's test ends.
func StartLinkProxy(tb testing.TB, target string, rtt time.Duration, bitsPerSecond int64) *LinkProxy {
	tb.Helper()
	ln := listenLoopback(tb, "link proxy")
	p := &LinkProxy{Addr: ln.Addr().String(), target: target, delay: rtt / 2, bps: float64(bitsPerSecond) / 8, ln: ln}
	go p.serve()
	tb.Cleanup(p.Close)
	return p
}

// URL is scheme://Addr.
func (p *LinkProxy) URL(scheme string) string { return scheme + "://" + p.Addr }

// Moved is the bytes forwarded in direction d so far.
func (p *LinkProxy) Moved(d Direction) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.moved[d]
}

// Close stops the listener and closes every connection.
func (p *LinkProxy) Close() {
	p.conns.close()
	p.ln.Close()
}

func (p *LinkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.conns.track(c, true) {
			continue
		}
		go p.pipe(c)
	}
}

func (p *LinkProxy) pipe(client net.Conn) {
	defer p.conns.track(client, false)
	defer client.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.conns.track(up, true) {
		return
	}
	defer p.conns.track(up, false)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.shape(client, up, ToServer) }()
	go func() { defer wg.Done(); p.shape(up, client, ToClient) }()
	wg.Wait()
}

// arrival is when a chunk of n bytes read now in direction d reaches the
// other end: after the bytes ahead of it on the link, its own
// transmission, and the propagation delay.
func (p *LinkProxy) arrival(d Direction, n int) time.Time {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moved[d] += int64(n)
	if p.bps <= 0 {
		return now.Add(p.delay)
	}
	start := now
	if p.free[d].After(start) {
		start = p.free[d]
	}
	p.free[d] = start.Add(time.Duration(float64(n) / p.bps * float64(time.Second)))
	return p.free[d].Add(p.delay)
}

type linkChunk struct {
	b  []byte
	at time.Time
}

// shape forwards from r to w, each chunk at its arrival time; at r's end
// it half-closes w once everything ahead has arrived.
func (p *LinkProxy) shape(r, w net.Conn, d Direction) {
	q := make(chan linkChunk, 1024)
	go func() {
		defer close(q)
		for {
			// Chunks of at most 16 KiB: a chunk's transmission time is
			// what the link serializes.
			buf := make([]byte, 16<<10)
			n, err := r.Read(buf)
			if n > 0 {
				q <- linkChunk{buf[:n], p.arrival(d, n)}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range q {
		if failed {
			continue // drain the reader
		}
		if wait := time.Until(c.at); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := w.Write(c.b); err != nil {
			failed = true
			r.Close()
		}
	}
	if tc, ok := w.(*net.TCPConn); ok && !failed {
		_ = tc.CloseWrite()
	} else {
		w.Close()
	}
}
