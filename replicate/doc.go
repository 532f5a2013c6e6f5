// Package replicate is the copier of the second site (docs/second-site.md):
// a separate process, holding a read credential on the primary and a write
// credential on the second site, that copies every complete object of the
// primary's prefix into the second site's prefix, create-only, each
// verified by its sha256. Backups and the journal never wait for it: it
// reads what they stored.
//
// What it copies, once complete on the primary:
//   - a backup folder once its manifest exists: the data objects the
//     manifest names, each checked against the manifest's StoredSHA256
//     while it streams (a primary object that does not match is not
//     copied, and reported), the other objects of the folder (its started
//     marker), the escrow the manifest names (checked the same way), then
//     the manifest, then the drill record: a folder is visible on the
//     second site only once its manifest is, as on the primary;
//   - a journal segment, gap record or proof record once it exists;
//   - the prefix's owner record.
//
// It never copies _staged/ (plaintext), _restores/, _undeletes/ (an
// undelete's records: key names of a live cluster's operations, which
// delete --all-backups removes with the cluster on the primary, while the
// copier never deletes) or _replica/, nor orphan markers (the second
// site's own lifecycle decides), nor an escrow no manifest names yet (a
// backup in flight).
//
// Every copy is a streaming GET from the primary into a create-only PUT on
// the second site (If-None-Match; with a retention when the second
// bucket is locked), hashed on the fly, then read back and hashed again.
// An object already on the second site with the same sha256 counts as
// copied (a restart); with other bytes it is a verification failure: kept,
// never overwritten, logged with both hashes and recorded in the status
// record. A drill record or owner record is replaced on the primary by a
// later one: the first copy stays (create-only), and a later one is
// counted as superseded, not as a failure.
//
// The copier never deletes on the second site: it holds it as a site,
// whose only writes are create-only copies and its status record
// (<prefix>/_replica/status.json, the one object it replaces). Nothing
// deleted on the primary is ever deleted there.
//
// Once is one full pass; Run is the loop: a journal poll per cluster every
// JournalInterval (listing from just before the last segment copied,
// store.ListAfterOf, which also shows whether it is still on the
// primary), a journal audit per cluster at its first poll, every
// AuditInterval and whenever that segment is gone (the whole journal
// folder listed on both sites, what the second site misses copied), a
// full scan every ScanInterval (backups, records, and the clusters to
// poll), the status record every StatusEvery and after each full scan.
// The status record found at the start is not trusted: the watermarks
// come from the audits, its failures are checked again. A failing second site is retried with a capped
// backoff; what it misses stays pending on the primary and is copied,
// exactly, when it answers again.
package replicate
