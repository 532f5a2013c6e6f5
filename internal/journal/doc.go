// Package journal is the continuous backup of a cluster's keyspace: every
// event of every revision after a full backup, in revision order, in
// immutable segments stored beside the backups
// (catalog.Layout.JournalSegmentKey: <prefix>/_journal/<cluster>/<first>-<last>.seg)
// through internal/objectio's encoding (zstd, age with recipients).
//
// It owns:
//
//   - the types (event.go): Event (one change of one key at one
//     revision, Sub its index within the revision), Lease (ID and granted
//     TTL), Header (cluster, base backup, revision range, receive times);
//   - the segment format (segment.go): JSON lines, the Header first, the
//     events, then a trailer with the event count and the sha256 of every
//     byte before it; Encode, and the streaming Decoder that refuses, as a
//     *SegmentError naming the segment's key and a Reason, another format,
//     cluster or base backup, events out of (revision, sub) order or
//     outside [FirstRev, LastRev], a revision without events, a count that
//     does not match, a truncated or damaged segment;
//   - the segments in the store (segstore.go): WriteSegment (create-only),
//     OpenSegment/ReadSegment (age and zstd recognised from the bytes, the
//     key's revisions checked against the header), ListSegments (the Chain
//     from a base revision: continuity, the last revision reachable
//     exactly, the first gap or overlap by name);
//   - the stored journal as a reader (source.go): Source, restore's
//     JournalSource (Events, Leases over the chain of segments holding a
//     revision range, from inside a segment when a snapshot's revision
//     is), a *ReachError naming the last revision reachable, RevisionAt
//     (time to revision through the Received times);
//   - how far it reaches (reach.go): Source.Reach, the last revision
//     reachable exactly from a revision and when it was received (restore
//     --to-latest), ErrNothingAfter for a journal ending before it;
//   - journal find (find.go): Finder/Find, the changes of a key or a
//     prefix over decoded segments, pure;
//   - the restorable window (window.go): ComputeWindow, pure, the spans
//     of revisions a restore reaches exactly (each backup's revision and
//     the chain of segments continuing it, as Cover reads them) and the
//     holes between, with the newest journaled revision's receive time
//     (Window.Lag: the journal lag, the RPO right now); LoadWindow and
//     WindowOf read it from the store (one listing, one header); list.go
//     is `list` with the window (List: prune.List, then WindowOf);
//   - where a (re)starting journal continues (resume.go): ChooseBase,
//     Continuation (the chain from the segment holding a backup's
//     revision + 1: a kept backup inside a chain whose first base
//     retention pruned continues it) and Continues, the one rule by which
//     a segment continues the one before it (same cluster, the next
//     revision; the bases headers name may differ), for every reader;
//   - the capture (capture.go): Capture, a watch of the whole keyspace
//     from the base (or where the stored segments end) into segments cut
//     by interval or size at revisions' ends, leases looked up as they
//     appear (their TTLs also polled) and their revokes recorded at the
//     revision deleting their keys (the watch's previous values; a revoke
//     not placed when a segment is sealed rides in its header, for the
//     next start and the replay; a TTL never learned is marked unknown,
//     UnknownLeaseTTL on replay), uploads
//     retried, a store slower than the cluster pausing the
//     watch (bounded memory), and a GapError when the journal cannot
//     continue exactly (a compacted or cancelled watch, a broken chain);
//   - the watch's liveness (watchdog.go): a watch silent for
//     min(SegmentInterval, WatchProbeEvery) is probed (the cluster's
//     revision read linearizably, a progress notification requested on
//     the watch's own stream); one that has not shown that revision within
//     WatchStallTimeout, or a new one not created within it, is a
//     WatchStall (a frozen, partitioned or unreachable member, or none
//     answering): logged, reported (OnStall), and watched again from the
//     awaited revision exactly on a new stream, with backoff while no
//     member answers. A silent watch that has not yet shown the
//     cluster's revision, whose own member answers (Status) ahead of it,
//     is a catch-up etcd is still reading: waited for up to
//     WatchCatchUpTimeout, doubled for each such stall in a row.
//
// Where a revision's time comes from: Header.Received maps revisions to
// when the capture received them (unix ms): a segment's first and last
// revision, and one revision at most every ReceivedEvery (100 ms) between,
// each the receive time of the watch response holding it. A revision's
// commit time is therefore known to within the watch's delivery delay
// (milliseconds on a healthy cluster) plus, between recorded revisions,
// 100 ms.
//
// It is plumbing: it imports internal/catalog, internal/objectio,
// internal/seal, internal/store and etcd's client, never a feature. The
// journal command and the replay (a restore stage writing the events
// into a fetched bbolt file through internal/etcdinternals) build on it.
package journal
