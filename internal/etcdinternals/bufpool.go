package etcdinternals

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// BufferPool returns the pool the client's gRPC connections receive into
// (experimental.WithBufferPool), and that snapshot chunks are kept in
// until they are compressed: a pool that does not clear its buffers, or
// gRPC's default pool when [Enabled] is false.
//
// gRPC's default pool clears every buffer it hands out. gRPC only uses the
// part of a buffer that a read from the connection has filled, so for a
// snapshot stream the clearing is pure cost: it was a tenth of the
// backup's CPU. This pool is the same tiered sync.Pool without the
// clearing. Buffers only ever hold bytes this process received.
func BufferPool() mem.BufferPool {
	if !Enabled() {
		return mem.DefaultBufferPool()
	}
	return bufferPool
}

var bufferPool mem.BufferPool = newTieredPool(8, 20)

type tieredPool struct {
	minExp, maxExp int
	tiers          []sync.Pool
}

func newTieredPool(minExp, maxExp int) *tieredPool {
	p := &tieredPool{minExp: minExp, maxExp: maxExp, tiers: make([]sync.Pool, maxExp-minExp+1)}
	for i := range p.tiers {
		size := 1 << (minExp + i)
		p.tiers[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
	return p
}

// tier is the index of the smallest tier holding n bytes, or -1.
func (p *tieredPool) tier(n int) int {
	e := max(bits.Len(uint(n-1)), p.minExp)
	if n <= 0 {
		e = p.minExp
	}
	if e > p.maxExp {
		return -1
	}
	return e - p.minExp
}

func (p *tieredPool) Get(length int) *[]byte {
	t := p.tier(length)
	if t < 0 {
		b := make([]byte, length)
		return &b
	}
	b := p.tiers[t].Get().(*[]byte)
	*b = (*b)[:length]
	return b
}

func (p *tieredPool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	t := p.tier(c)
	if t < 0 || 1<<(p.minExp+t) != c {
		return
	}
	*b = (*b)[:c]
	p.tiers[t].Put(b)
}
