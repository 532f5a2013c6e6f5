package etcdinternals

import "testing"

func TestTieredPool(t *testing.T) {
	p := newTieredPool(8, 20)
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 16384, 16385, 32 << 10, 1 << 20, 1<<20 + 1, 5 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(*b))
		}
		if n <= 1<<20 {
			c := cap(*b)
			if c < n || c&(c-1) != 0 || (n > 256 && c >= 2*n) {
				t.Fatalf("Get(%d) has capacity %d", n, c)
			}
		}
		(*b)[:cap(*b)][0] = 1
		p.Put(b)
	}
	// A buffer comes back with its whole capacity.
	b := p.Get(100)
	p.Put(b)
	if b2 := p.Get(200); cap(*b2) != 256 {
		t.Fatalf("capacity %d", cap(*b2))
	}
}
