package backup

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/armada/etcd-recovery/internal/etcdconn"
)

// snapshotChunk is one Maintenance.Snapshot response as the backup reads
// it: the blob, still in the buffer gRPC received it into. Release hands
// the buffer back; the blob must not be used after.
type snapshotChunk struct {
	blob []byte
	buf  mem.Buffer
}

func (c *snapshotChunk) Release() {
	if c.buf != nil {
		c.buf.Free()
		c.buf = nil
	}
	c.blob = nil
}

// snapshotCodec decodes SnapshotResponse without copying the blob: the
// generated code allocates a new slice for every 32 KiB chunk and copies
// into it, and then the buffer it came from is dropped. Here the chunk
// keeps a reference to the received buffer until it has been hashed and
// compressed. Requests are marshalled as usual.
type snapshotCodec struct{}

// snapshotCall makes a call use snapshotCodec.
var snapshotCall = grpc.ForceCodecV2(snapshotCodec{})

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
	c, ok := v.(*snapshotChunk)
	if !ok {
		return fmt.Errorf("snapshot codec: cannot unmarshal into %T", v)
	}
	// One buffer (the usual case) is referenced, not copied.
	buf := data.MaterializeToBuffer(etcdconn.BufferPool)
	blob, err := snapshotBlob(buf.ReadOnlyData())
	if err != nil {
		buf.Free()
		return err
	}
	c.blob, c.buf = blob, buf
	return nil
}

// snapshotBlob returns field 3 (blob) of a marshalled
// etcdserverpb.SnapshotResponse; the other fields (header, remaining
// bytes, version) are skipped.
func snapshotBlob(b []byte) ([]byte, error) {
	blob, _, err := BytesField(b, 3)
	if err != nil {
		return nil, fmt.Errorf("snapshot response: %w", err)
	}
	return blob, nil
}

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
