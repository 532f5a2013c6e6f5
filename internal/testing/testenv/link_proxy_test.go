package testenv_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// TestLinkProxyShapes: through a LinkProxy of 100 ms round trip and 8
// Mbit/s, to a real TCP server that reads an upload whole and answers its
// length, a small request's answer takes at least the round trip, and a
// 512 KiB upload at least its size over the bandwidth plus the round trip;
// every byte arrives, in order, and the proxy counts them. (Lower bounds
// only: a loaded machine is slower, never faster.)
func TestLinkProxyShapes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's half-close
				got <- b
				c.Write([]byte{byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))})
			}()
		}
	}()
	const rtt, bits = 100 * time.Millisecond, 8_000_000
	p := testenv.StartLinkProxy(t, ln.Addr().String(), rtt, bits)
	send := func(b []byte) time.Duration {
		t.Helper()
		start := time.Now()
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		ans, err := io.ReadAll(c)
		took := time.Since(start)
		if err != nil || len(ans) != 3 || int(ans[0])<<16|int(ans[1])<<8|int(ans[2]) != len(b) {
			t.Fatalf("answer %v %v, want the length %d", ans, err, len(b))
		}
		if r := <-got; !bytes.Equal(r, b) {
			t.Fatalf("the server read %d bytes, not the %d sent", len(r), len(b))
		}
		return took
	}
	if d := send([]byte("ping")); d < rtt {
		t.Errorf("a small request answered in %s, under the link's round trip %s", d, rtt)
	}
	big := make([]byte, 512<<10)
	rand.Read(big)
	min := time.Duration(float64(len(big)*8)/bits*float64(time.Second)) + rtt
	if d := send(big); d < min {
		t.Errorf("512 KiB answered in %s, under %s (its size over 8 Mbit/s plus the round trip)", d, min)
	}
	if up := p.Moved(testenv.ToServer); up != int64(len(big)+4) {
		t.Errorf("the proxy moved %d bytes to the server, want %d", up, len(big)+4)
	}
}
