package etcdinternals

import (
	"crypto/sha256"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// etcd's mvcc layout, copied because etcd does not export it (server/v3
// mvcc/kvstore.go, revision.go; mvcc/buckets/bucket.go exports the
// buckets but only behind its backend.Bucket interface). The "key" bucket
// maps a revision (8-byte big-endian main, '_', 8-byte sub; plus a
// trailing 't' for a deletion) to a marshalled mvccpb.KeyValue whose field
// 1 is the user key and field 6 the lease. The "meta" bucket records the
// compactions.
const (
	// RevBytesLen is the length of a revision key.
	RevBytesLen = 8 + 1 + 8
	// MarkedRevBytesLen is the length of a marked revision key.
	MarkedRevBytesLen = RevBytesLen + 1
	// MarkTombstone marks a deletion.
	MarkTombstone = 't'
)

// Bucket and key names of etcd's database. Callers must not modify them.
var (
	KeyBucket           = []byte("key")
	MetaBucket          = []byte("meta")
	FinishedCompactKey  = []byte("finishedCompactRev")
	ScheduledCompactKey = []byte("scheduledCompactRev")
)

// mvccpb.KeyValue field numbers.
const (
	kvKeyField   protowire.Number = 1
	kvLeaseField protowire.Number = 6
)

// KeyAndLease returns fields 1 (key) and 6 (lease) of a marshalled
// mvccpb.KeyValue. The value (field 5) in between is skipped by its
// length, never read: only the page holding the lease, after it, is
// touched. An empty value has no key and no lease.
func KeyAndLease(v []byte) (key []byte, lease int64, err error) {
	msg := v
	for len(msg) > 0 {
		n, typ, tl := protowire.ConsumeTag(msg)
		if tl < 0 {
			return nil, 0, protowire.ParseError(tl)
		}
		msg = msg[tl:]
		switch {
		case n == kvKeyField && typ == protowire.BytesType:
			b, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil, 0, protowire.ParseError(l)
			}
			key = b[:len(b):len(b)]
			msg = msg[l:]
			continue
		case n == kvLeaseField && typ == protowire.VarintType:
			x, l := protowire.ConsumeVarint(msg)
			if l < 0 {
				return nil, 0, protowire.ParseError(l)
			}
			lease = int64(x)
			msg = msg[l:]
			continue
		}
		l := protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil, 0, protowire.ParseError(l)
		}
		msg = msg[l:]
	}
	return key, lease, nil
}

// DropTrailer removes etcd's sha256 trailer from the database at path, if
// it is there: a database is whole pages, so the trailer is what leaves
// 32 bytes over a multiple of 512, as etcdutl recognises it. Whatever
// writes into a staged snapshot drops it first, since it no longer matches
// once the file changes.
func DropTrailer(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size()%512 == sha256.Size {
		if err := os.Truncate(path, st.Size()-sha256.Size); err != nil {
			return fmt.Errorf("drop etcd's trailer from %s: %w", path, err)
		}
	}
	return nil
}
