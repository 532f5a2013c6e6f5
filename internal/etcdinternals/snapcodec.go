package etcdinternals

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// SnapshotChunk is one Maintenance.Snapshot response as the backup reads
// it: the blob, still in the buffer gRPC received it into. Release hands
// the buffer back; Blob must not be used after.
type SnapshotChunk struct {
	Blob []byte
	buf  mem.Buffer
}

// Release hands the chunk's buffer back to the pool.
func (c *SnapshotChunk) Release() {
	if c.buf != nil {
		c.buf.Free()
		c.buf = nil
	}
	c.Blob = nil
}

// snapshotCodec decodes SnapshotResponse without copying the blob: the
// generated code allocates a new slice for every 32 KiB chunk and copies
// into it, and then the buffer it came from is dropped. Here the chunk
// keeps a reference to the received buffer until it has been hashed and
// compressed. Requests are marshalled as usual.
type snapshotCodec struct{}

// SnapshotCallOptions are the call options of a Maintenance.Snapshot call
// whose responses are read with [RecvSnapshotChunk]: the forced codec, or
// none when [Enabled] is false.
func SnapshotCallOptions() []grpc.CallOption {
	if !Enabled() {
		return nil
	}
	return []grpc.CallOption{grpc.ForceCodecV2(snapshotCodec{})}
}

// RecvSnapshotChunk receives the next response of a Maintenance.Snapshot
// stream opened with [SnapshotCallOptions]. The error is the stream's
// (io.EOF at the end).
func RecvSnapshotChunk(stream grpc.ClientStream) (SnapshotChunk, error) {
	if !Enabled() {
		var resp pb.SnapshotResponse
		err := stream.RecvMsg(&resp)
		return SnapshotChunk{Blob: resp.Blob}, err
	}
	var c SnapshotChunk
	err := stream.RecvMsg(&c)
	return c, err
}

func (snapshotCodec) Name() string { return "proto" }

func (snapshotCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(interface{ Marshal() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("snapshot codec: cannot marshal %T", v)
	}
	b, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (snapshotCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c, ok := v.(*SnapshotChunk)
	if !ok {
		return fmt.Errorf("snapshot codec: cannot unmarshal into %T", v)
	}
	// One buffer (the usual case) is referenced, not copied.
	buf := data.MaterializeToBuffer(bufferPool)
	blob, err := snapshotBlob(buf.ReadOnlyData())
	if err != nil {
		buf.Free()
		return err
	}
	c.Blob, c.buf = blob, buf
	return nil
}

// snapshotBlob returns field 3 (blob) of a marshalled
// etcdserverpb.SnapshotResponse; the other fields (header, remaining
// bytes, version) are skipped.
func snapshotBlob(b []byte) ([]byte, error) {
	blob, _, err := BytesField(b, snapshotBlobField)
	if err != nil {
		return nil, fmt.Errorf("snapshot response: %w", err)
	}
	return blob, nil
}

// snapshotBlobField is SnapshotResponse's blob (etcdserverpb/rpc.proto).
const snapshotBlobField protowire.Number = 3

// BytesField returns the first occurrence of length-delimited field num of
// a marshalled protobuf message, without decoding or reading the other
// fields' contents: what comes after the field is never touched.
func BytesField(msg []byte, num protowire.Number) (v []byte, found bool, err error) {
	for len(msg) > 0 {
		n, typ, tl := protowire.ConsumeTag(msg)
		if tl < 0 {
			return nil, false, protowire.ParseError(tl)
		}
		msg = msg[tl:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil, false, protowire.ParseError(l)
			}
			return v[:len(v):len(v)], true, nil
		}
		l := protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil, false, protowire.ParseError(l)
		}
		msg = msg[l:]
	}
	return nil, false, nil
}
