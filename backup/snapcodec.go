package backup

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

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
// bytes, version) are skipped. A blob that appears twice is the last one,
// as protobuf merges it.
func snapshotBlob(b []byte) ([]byte, error) {
	var blob []byte
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("snapshot response: bad protobuf tag")
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		switch wire {
		case 0:
			if _, n = binary.Uvarint(b); n <= 0 {
				return nil, errors.New("snapshot response: bad protobuf varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, errors.New("snapshot response: short fixed64")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return nil, errors.New("snapshot response: short fixed32")
			}
			b = b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("snapshot response: bad protobuf length")
			}
			if field == 3 {
				blob = b[n : n+int(l) : n+int(l)]
			}
			b = b[n+int(l):]
		default:
			return nil, fmt.Errorf("snapshot response: protobuf wire type %d", wire)
		}
	}
	return blob, nil
}
