package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// Journal proofs (a journal is proven continuously, not only when a restore needs it): the newest proof
// record of each cluster (<prefix>/_journal/<cluster>/proofs/, written by
// drill.ProveJournal: `journal prove` and every drill of a stored backup).
const (
	NameJournalProofFailed    = "etcd_recovery_journal_proof_failed"
	NameJournalProofTimestamp = "etcd_recovery_journal_proof_timestamp_seconds"
)

var (
	descJournalProofFailed = prometheus.NewDesc(NameJournalProofFailed,
		"1 when the newest journal proof of the cluster (the proof before its newest proven backup) failed: the full backup before it plus the journal did not hash as the backup; the window between them is withdrawn from point-in-time restore. Absent when no proof is recorded.", cl, nil)
	descJournalProofTimestamp = prometheus.NewDesc(NameJournalProofTimestamp,
		"Time (unix seconds) the newest journal proof of the cluster was made; absent when none is recorded.", cl, nil)
)

// JournalProofState is a cluster's newest journal proof.
type JournalProofState struct {
	Base   string    `json:"base"`
	Target string    `json:"target"`
	Failed bool      `json:"failed"`
	Time   time.Time `json:"time"`
}

// newestProofKeys are, per cluster, the key of the newest journal proof in
// a listing of the root (by its target backup's name: names sort by time).
func newestProofKeys(layout catalog.Layout, objs []store.ObjectInfo) map[string]catalog.KeyInfo {
	out := map[string]catalog.KeyInfo{}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournalProof {
			continue
		}
		if cur, ok := out[ki.ClusterID]; !ok || ki.Name > cur.Name {
			out[ki.ClusterID] = ki
		}
	}
	return out
}

// readProofs reads each cluster's newest journal proof. A record that
// cannot be read fails the read_drills step (proofs are the drills'), and
// that cluster's previous state stays.
func (e *Exporter) readProofs(ctx context.Context, objs []store.ObjectInfo, fail func(string, error)) (map[string]*JournalProofState, map[string]bool) {
	proofs, unread := map[string]*JournalProofState{}, map[string]bool{}
	for id, ki := range newestProofKeys(e.opts.Layout, objs) {
		p, err := catalog.ReadJournalProof(ctx, e.opts.Store, e.opts.Layout, id, ki.Name)
		if err != nil {
			fail(StepReadDrills, fmt.Errorf("journal proof: %w", err))
			unread[id] = true
			continue
		}
		proofs[id] = &JournalProofState{Base: p.Base, Target: p.Target, Failed: p.Failed(), Time: p.Time}
	}
	return proofs, unread
}

// proofStates sets the clusters' newest journal proofs from a store read
// (a cluster whose record could not be read keeps its previous one).
func proofStates(next map[string]*ClusterState, sr *storeRead) {
	for id, st := range next {
		if sr.proofsUnread[id] {
			continue
		}
		st.JournalProof = sr.proofs[id]
	}
}

func collectJournalProof(gauge func(*prometheus.Desc, float64, ...string), c ClusterState) {
	if p := c.JournalProof; p != nil {
		gauge(descJournalProofFailed, b2f(p.Failed), c.Cluster)
		gauge(descJournalProofTimestamp, unixSeconds(p.Time), c.Cluster)
	}
}
