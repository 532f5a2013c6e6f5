// Package faultmatrix is the end-to-end fault matrix: it runs the
// real etcd-recovery binary as a child process, with real flags and
// environment, against real etcd 3.5 members and real MinIO servers on
// loopback, injects one fault per row (SIGSTOP/SIGKILL of MinIO and of etcd
// members, a listener that accepts TCP and never answers, damaged objects,
// expired and foreign certificates, a full tmpfs, SIGINT/SIGTERM at every
// step) and checks the promises of the fault matrix (docs/fault-matrix.md) for each:
//
//   - the run ends within its bound (the configured timeout plus a stated
//     slack, never a tight wall-clock bound);
//   - it never exits 0 on a failure, and its exit code is the documented one
//     (1 failure, 3 inspect UNREACHABLE, 4 usage, 130 cancelled);
//   - it leaves no committed backup that does not restore (every backup with a
//     manifest passes `restore --dry-run --backup NAME`) and no multipart
//     upload under the keys the run touched, once the store is back.
//
// Steps are reached through observable conditions, never sleeps: a TCP proxy
// in front of the store (internal/testenv FaultProxy) sees and holds the S3
// request of each step (CreateMultipartUpload, UploadPart, the v2 PUT, the
// manifest PUT, the snapshot GET); log lines on stderr name the member being
// streamed; files appearing under the data-dir root mark the data-dir write.
//
// The journal (`etcd-recovery journal`) is not in this harness: it is
// long-running and never exits on a fault, so there is no exit code or
// run bound to check. Its rows (a frozen, partitioned or killed member,
// every member down, a frozen store) are in docs/fault-matrix.md's "The
// journal", proven by internal/journal's TestCaptureMemberFaults and
// TestCaptureFrozenStoreIsNamed and cmd/etcd-recovery's
// TestPointInTimeRestoreExact.
//
// The package has only tests; it is run by `make test`.
package faultmatrix
