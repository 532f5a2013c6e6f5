package etcdinternals_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// gRPC only reads the part of a pooled buffer that it filled: a snapshot
// received through the non-zeroing pool, whose buffers were all filled
// with junk first, and decoded by the forced codec, still matches etcd's
// own trailing sha256.
func TestSnapshotOverPoisonedPool(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/p/", 2000, 500)
	pool := etcdinternals.BufferPool()
	var held []*[]byte
	for _, n := range []int{256, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20} {
		for range 8 {
			b := pool.Get(n)
			for i := range *b {
				(*b)[i] = 0xAA
			}
			held = append(held, b)
		}
	}
	for _, b := range held {
		pool.Put(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := testfix.EtcdConfig(c).Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	stream, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Snapshot(ctx, &pb.SnapshotRequest{}, etcdinternals.SnapshotCallOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	chunks := 0
	for {
		ch, err := etcdinternals.RecvSnapshotChunk(stream)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all.Write(ch.Blob)
		ch.Release()
		chunks++
	}
	b := all.Bytes()
	if len(b) < 1<<20 || chunks < 2 {
		t.Fatalf("%d bytes in %d chunks: too small to prove anything", len(b), chunks)
	}
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	if !bytes.Equal(sum[:], b[len(b)-sha256.Size:]) {
		t.Fatal("the snapshot received through the pool does not match etcd's sha256")
	}
}
