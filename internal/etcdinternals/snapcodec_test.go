package etcdinternals_test

import (
	"bytes"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

func TestBytesField(t *testing.T) {
	kv, err := (&mvccpb.KeyValue{Key: []byte("/registry/pods/a"), CreateRevision: 7, ModRevision: 9, Version: 2,
		Value: bytes.Repeat([]byte("v"), 300), Lease: 12345}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if k, ok, err := etcdinternals.BytesField(kv, 1); err != nil || !ok || string(k) != "/registry/pods/a" {
		t.Fatalf("key: %q %v %v", k, ok, err)
	}
	// The value's last bytes, and the lease after them, are not needed to
	// find the key: a message cut inside the value still yields it.
	if k, _, err := etcdinternals.BytesField(kv[:len(kv)-200], 1); err != nil || string(k) != "/registry/pods/a" {
		t.Fatalf("key of a cut message: %q %v", k, err)
	}
	if _, _, err := etcdinternals.BytesField(kv[:len(kv)-200], 6); err == nil {
		t.Fatal("a field past a cut was found")
	}
	if _, ok, err := etcdinternals.BytesField(kv, 8); ok || err != nil {
		t.Fatalf("absent field: %v %v", ok, err)
	}
	if _, ok, err := etcdinternals.BytesField(nil, 1); ok || err != nil {
		t.Fatalf("empty message: %v %v", ok, err)
	}
	if _, _, err := etcdinternals.BytesField([]byte{0x0a, 0x05, 'a'}, 1); err == nil {
		t.Fatal("a length past the end was accepted")
	}
	resp, err := (&etcdserverpb.SnapshotResponse{Header: &etcdserverpb.ResponseHeader{Revision: 5}, RemainingBytes: 99,
		Blob: []byte("chunk")}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if b, ok, err := etcdinternals.BytesField(resp, 3); err != nil || !ok || string(b) != "chunk" {
		t.Fatalf("blob: %q %v %v", b, ok, err)
	}
}
