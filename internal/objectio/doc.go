// Package objectio is the one format of the data objects the tool stores
// (a backup's snapshot and v2 export, a staged copy) and the one way they
// are written and read back.
//
// The write path, [NewWriter] and [Write]/[Create]:
//
//	raw bytes → zstd (Compression) → age (internal/seal, with recipients) → sha256 → store
//
// and the verifying read path, [Open]:
//
//	store → sha256 of the stored bytes → age → zstd → sha256 (and etcd's trailer) of the raw bytes
//
// Open streams in three overlapping stages (download, decrypt and
// decompress, hash and hand over), each a few recycled 1 MiB buffers: no
// whole object is ever held in memory. Its reader never returns io.EOF
// before the stored and raw sizes and sha256s were checked against the
// [Expect]ation; a mismatch is an [*Error] (errors.As) naming the object
// and what did not match, while a store that could not be read returns the
// store's error (store.IsStoreError) and a missing object an *Error of
// [KindMissing] wrapping store.ErrNotFound. [ReadBack] is "upload, then read
// back and compare".
//
// [PutWith] and [CreateWith] are Put and Create with [PutOptions]: an
// object-lock retention for the new object (store.Locker), written
// create-only where the store can.
//
// It also holds the hashers both directions share ([SnapshotHasher],
// [HashCounter]).
//
// It owns its encodings (Compression), and the one read and create-only
// write of a small stored record (ReadRecord, CreateRecord), which every
// record of the catalog goes through.
//
// objectio is plumbing: it imports internal/seal and internal/store only. backup writes through it;
// restore, kube (the staged copy) and the test harness read through it.
package objectio
