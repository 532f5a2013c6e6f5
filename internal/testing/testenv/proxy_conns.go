package testenv

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// listenLoopback listens on a reserved loopback port for a proxy (what
// names it). A reserved port can still lose the bind race to a process
// that picks ports some other way (seen once in ~10 matrix runs beside
// other packages): it takes another reserved port then, a few times at
// most.
func listenLoopback(tb testing.TB, what string) net.Listener {
	tb.Helper()
	var ln net.Listener
	var err error
	for try := 0; try < 5; try++ {
		port := FreePort(tb)
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln
		}
		tb.Logf("testenv: %s listen on port %d: %v; taking another port", what, port, err)
	}
	tb.Fatalf("testenv: %s listen: %v", what, err)
	return nil
}

// connSet is a proxy's open connections; once closed it takes no more.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// track adds c (add) or removes it; adding to a closed set closes c and
// is false.
func (s *connSet) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closed {
			c.Close()
			return false
		}
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// close closes the set and every connection in it; false when it was
// already closed.
func (s *connSet) close() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	return true
}
