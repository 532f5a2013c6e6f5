package journal

import (
	"io"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Closing a segment reader closes its decompressor too: a replay opens
// hundreds of segments (twice: headers for the leases, then the events),
// and every decompressor left open kept its goroutines and buffers, the
// replay's memory growing with the journal's length.
func TestSegmentReaderClosesDecompressor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, layout := memstore.New(), catalog.Layout{Prefix: "p"}
	h := Header{ClusterID: "c1", BaseBackup: "b", BaseRev: 1, FirstRev: 2, LastRev: 2}
	info, err := WriteSegment(ctx, st, layout, objectio.Encoding{Compression: objectio.CompressZstd}, h,
		[]Event{{Rev: 2, Type: Put, Key: []byte("k"), Value: []byte("v"), CreateRev: 2, Version: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, whole := range []bool{false, true} {
		r, err := OpenSegment(ctx, st, layout, info.Key, nil, Want{ClusterID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		dec, ok := r.zstd.(io.Reader)
		if !ok || dec == nil {
			t.Fatalf("a zstd segment read without a decompressor to close: %T", r.zstd)
		}
		if whole {
			for {
				if _, err := r.Next(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := dec.Read(make([]byte, 1)); err == nil || err == io.EOF {
			t.Fatalf("the decompressor still reads after Close (read whole: %t): %v", whole, err)
		}
	}
}
