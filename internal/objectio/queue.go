package objectio

import (
	"context"
	"io"
)

// Streaming: three stages overlap on separate goroutines, so download,
// decompression and hashing run in parallel instead of taking turns:
//
//	store → [stored sha256] → chunks → age, zstd → chunks → [raw sha256, reader]
//
// Each queue holds a few 1 MiB buffers, recycled: memory stays flat
// whatever the object's size.
const (
	chunkSize  = 1 << 20
	queueDepth = 4
)

// chunkQueue hands filled buffers from a producer to a consumer and the
// empty ones back.
//
// err is the producer's: it is written once, just before full is closed,
// and may be read only by a goroutine that has seen that close (a receive
// from full that reports it closed, or a wait on the producer's end).
// Anything else is a data race: the producer may still be running.
type chunkQueue struct {
	full chan []byte
	free chan []byte
	err  error // why the producer stopped; set before full is closed
}

func newChunkQueue() *chunkQueue {
	q := &chunkQueue{full: make(chan []byte, queueDepth), free: make(chan []byte, queueDepth+2)}
	for range queueDepth + 2 {
		q.free <- make([]byte, chunkSize)
	}
	return q
}

// queueReader reads a chunkQueue as a stream.
type queueReader struct {
	ctx context.Context
	q   *chunkQueue
	buf []byte // the chunk being read, returned to free when done
	cur []byte
}

func (r *queueReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.buf != nil {
			r.q.free <- r.buf[:cap(r.buf)]
			r.buf = nil
		}
		select {
		case b, ok := <-r.q.full:
			if !ok {
				if r.q.err != nil {
					return 0, r.q.err
				}
				return 0, io.EOF
			}
			r.buf, r.cur = b, b
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// fill reads from r into free buffers and queues them until r ends. The
// queue is closed with r's error (nil at EOF).
func (q *chunkQueue) fill(ctx context.Context, r io.Reader, tap func([]byte)) {
	var err error
	defer func() {
		q.err = err
		close(q.full)
	}()
	for {
		var buf []byte
		select {
		case buf = <-q.free:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		n := 0
		for n < len(buf) && err == nil {
			var k int
			k, err = r.Read(buf[n:])
			n += k
		}
		if n > 0 {
			if tap != nil {
				tap(buf[:n])
			}
			select {
			case q.full <- buf[:n]:
			case <-ctx.Done():
				err = ctx.Err()
				return
			}
		}
		if err == io.EOF {
			err = nil
			return
		}
		if err != nil {
			return
		}
	}
}
