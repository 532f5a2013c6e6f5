// Package seal is the client-side encryption of backups: age
// (filippo.io/age, X25519 recipients only) around the compressed snapshot
// and v2 export, streamed, with no temp file.
//
// Order: the caller compresses, then encrypts, in one stream:
//
//	etcd snapshot → zstd writer → seal.Encrypt (age) → multipart upload
//
// and on the way back:
//
//	download → seal.Decrypt (age) → zstd reader → restore
//
// Backup jobs hold recipients (public keys) only: [LoadRecipients] merges
// `--encrypt-to` values and recipients files, [RecipientsFromEnv] reads
// [EnvEncryptTo] and [EnvRecipientsFile]. Only restore, restore v2, restore
// verify --backup and drill load an identity (private key) with
// [ReadIdentityFile].
//
// Errors never carry key material: recipient values are public and may be
// named; identity file lines are never echoed, only their file and line
// number. [Decrypt] fails before anything is written when no identity
// matches ([ErrNoIdentity], naming the recipients the backup was encrypted
// to), and a damaged or tampered object (header, payload, truncation,
// trailing data) is reported as [ErrTampered], never as a transport error a
// retry loop would repeat.
//
// Identity file permissions: a file accessible to others (any of mode
// 0o007) is refused; group bits are accepted with a warning, because the
// kubelet adds 0440 to a Secret volume's files when the pod has an
// fsGroup: a Secret mounted with `defaultMode: 0400` into a pod with
// `fsGroup: 65532` (as deploy/ does) shows up as 0440 root:65532. Without
// an fsGroup, 0400 root-owned files are unreadable for uid 65532, so the
// fsGroup is needed anyway.
//
// Plaintext scratch space (the drill-after-backup copy, restore staging) is
// a 0700 directory of 0600 files from [NewScratch], removed by its
// idempotent Remove on every return path, and by [RemoveAllScratch] from a
// hard-exit path (the second signal).
package seal
