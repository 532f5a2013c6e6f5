// Package etcdinternals is every place the tool relies on the internals of
// etcd, bbolt or gRPC rather than on their public APIs: what they are, why
// the tool does it, and the test that fails when an upgrade changes what
// it relies on. Versions: etcd 3.5.35 (go.etcd.io/etcd/server/v3,
// etcdutl/v3), go.etcd.io/bbolt v1.3.12, google.golang.org/grpc v1.83.2.
//
//	reliance                     depends on (etcd 3.5.35, bbolt 1.3.12, grpc 1.83.2)  why                                        pinned by
//	---------------------------  ---------------------------------------------------  -----------------------------------------  ----------------------------------
//	etcd's bbolt options         server/v3/mvcc/backend config_linux.go:              etcdutl's restore opens each member's DB   TestEtcdBoltOptionsDeclaration
//	(go:linkname, init;          boltOpenOptions, a *bolt.Options literal setting    4 times: with MAP_POPULATE and no stored   TestTunedOptionsReachEtcdBackend
//	TuneBoltOptions)             exactly MmapFlags (MAP_POPULATE), NoFreelistSync     freelist, 572 MiB RSS per member for a     TestTuneBoltOptionsNilIsNoOp
//	                             (nil on darwin/windows: config_default/_windows.go)  528 MiB DB; ~75 MiB with the tuning        TestTuneBoltOptionsLinuxValues
//	hand-written freelist        bbolt page.go, db.go, freelist.go: 16-byte page      etcd's snapshots carry no freelist: every  TestBoltLayoutMatchesBbolt
//	(SyncFreelist)               header, page flags, 64-byte meta with FNV-64a        open would walk every page through the     TestSyncFreelistAgreesWithBbolt
//	                             checksum, freelist page (0xFFFF count overflow),     mmap to rebuild it                         TestSyncFreelistLargeCount
//	                             native byte order; bbolt's reachability rule                                                    TestSyncFreelistRefusesDamage
//	staged revision bump         etcdutl/v3/snapshot v3_snapshot.go                   one bump on the staged file instead of a   TestPreparedRestoreMatchesEtcdutl
//	(BumpRevision,               modifyLatestRevision: empty key at latest+bump,      walk of the key bucket per member
//	PrepareSnapshot)             scheduledCompactRev
//	etcd's mvcc layout           mvcc/buckets (key, meta), mvcc/kvstore.go and        the restore's key count, revision and      TestBucketNamesMatchEtcd
//	(KeyBucket, MetaBucket,      revision.go (17-byte revision keys, 't' tombstone,   compaction facts are read straight from    TestRevisionLayoutMatchesEtcd
//	*CompactKey, RevBytesLen,    finishedCompactRev, scheduledCompactRev, all         the bbolt file, without etcd's backend     TestKeyAndLease
//	KeyAndLease)                 unexported), mvccpb.KeyValue fields 1 and 6
//	journal replay               mvcc/kvstore_txn.go put and delete (KeyValue under   a point-in-time restore applies the        TestApplyEventsMatchesEtcd
//	(ApplyEvents, EventEntry,    {rev, sub}; a tombstone KeyValue{Key} marked 't'),   journal's events straight into the staged  TestApplyBucketNamesMatchEtcd
//	LeaseEntry, LeaseBucket,     lease/lessor.go (bucket "lease", 8-byte big-endian   bbolt file, not through an etcd client     TestApplyEventsRefuses
//	SnapshotRevision,            ID, leasepb.Lease{ID, TTL}), kvstore.go restore      (client replay: 65x slower, BenchmarkReplay)
//	ApplyEventsWith)             (revision = max(last key, compactions))              in transactions committed every 16 MiB of  TestApplyEventsBatchesByBytes
//	                                                                                  entries: memory flat in the journal's size TestApplyEventsHeapBounded
//	offline HashKV (HashKV,      mvcc/hash.go kvHasher, kvstore.go hashByRev,        a journal proof hashes backup k plus the   TestHashKVMatchesEtcd
//	DatabaseRevisions, KVHash)   key_index.go keep (3.5 and 3.6 storage/mvcc alike):  journal and backup k+1 offline, at the
//	                             crc32c of "key" and entries in (compact, rev] plus   same compact revision, with no etcd
//	                             each key's latest put at rev, no tombstone at compact
//	madvise (DropResident)       bbolt's read-only shared mmap at DB.Info().Data;     a read-only walk of a 1 GiB DB would keep  TestDropResidentShrinksRSS
//	                             Linux MADV_DONTNEED semantics                        1 GiB resident
//	non-zeroing buffer pool      grpc/mem.BufferPool, experimental.WithBufferPool;    gRPC's default pool clears every buffer:   TestTieredPool
//	(BufferPool)                 gRPC reads only the part of a buffer it filled       a tenth of the backup's CPU                TestSnapshotOverPoisonedPool
//	forced snapshot codec        grpc.ForceCodecV2, encoding.CodecV2 named "proto",   the generated code copies every 32 KiB     TestSnapshotCodec, TestBytesField
//	(SnapshotCallOptions,        mem.BufferSlice; etcdserverpb.SnapshotResponse       chunk; chunks are hashed and compressed    TestSnapshotOverPoisonedPool
//	RecvSnapshotChunk)           field 3 is the blob (rpc.proto)                      from the buffer gRPC received them into
//
// The numbers are those of docs/restore-internals.md#memory-and-time and
// docs/backup.md#what-a-backup-does.
//
// # Fallback
//
// Setting ETCD_RECOVERY_NO_INTERNALS=1 (read once, by [Enabled]) turns all
// of this off: etcd's bbolt options are left as etcd sets them, restore
// skips [PrepareSnapshot] and lets etcdutl's public snapshot restore
// (etcdutl/v3/snapshot.Restore with its own RevisionBump and
// MarkCompacted, as `etcdutl snapshot restore --bump-revision
// --mark-compacted` does) do the whole job (a drill's bump without the
// mark, which etcdutl 3.5 does not apply on its own, is then made by
// [BumpRevision] through bbolt's public API), [DropResident] does nothing,
// and backups receive through gRPC's default pool and codec. Everything
// still works, only slower and with more memory (see docs/benchmarks.md:
// restore RSS and backup CPU). restore.Options.PublicRestorePath does the restore part
// for one restore.
package etcdinternals

import (
	"os"
	"sync"
)

// EnvNoInternals is the environment variable that, set to 1 (or true),
// turns every reliance of this package off (see the package doc).
const EnvNoInternals = "ETCD_RECOVERY_NO_INTERNALS"

// Enabled reports whether the tool may use etcd's, bbolt's and gRPC's
// internals: true unless ETCD_RECOVERY_NO_INTERNALS is 1 or true. The
// variable is read once per process; this is the only place it is read.
func Enabled() bool { return enabled() }

var enabled = sync.OnceValue(func() bool {
	switch os.Getenv(EnvNoInternals) {
	case "1", "true", "TRUE", "True", "yes":
		return false
	}
	return true
})
