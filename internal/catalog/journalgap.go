package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// JournalGap is the record of a gap in a cluster's journal, written
// create-only at Layout.JournalGapKey(ClusterID, From) by the journal job
// before the full backup that heals it: revisions From to To (0: unknown,
// up to that backup) are in no segment. A restore to a revision in it is
// refused (the chain breaks there); the next full backup's revision is
// where the journal starts again.
type JournalGap struct {
	ClusterID string `json:"clusterID"`
	From      int64  `json:"from"`
	To        int64  `json:"to,omitempty"`
	Reason    string `json:"reason"`
	Error     string `json:"error,omitempty"`
	// Time is when the journal found the gap.
	Time time.Time `json:"time"`
	// Lineage: the cluster's history is not the journal's (it went back:
	// a restore without a revision bump, or a cluster recreated under the
	// same name). The journal ends at From - 1; no full backup is taken
	// for it (one below the old history's last revision cannot start a
	// journal): the journal starts again from the first full backup past
	// it.
	Lineage bool `json:"lineage,omitempty"`
	// OldBase is the full backup the broken journal continued (nil when
	// there was none).
	OldBase *JournalBase `json:"oldBase,omitempty"`
	// Key is where the record is (not in the record itself).
	Key string `json:"-"`
}

// JournalBase names the full backup a journal continues: its name and
// revision.
type JournalBase struct {
	Name string `json:"name"`
	Rev  int64  `json:"rev"`
}

// WriteJournalGap writes g's record at g.Key, create-only: a record there
// already is store.ErrExists (the same gap found again by a restart).
func WriteJournalGap(ctx context.Context, st store.Store, g JournalGap) error {
	return objectio.CreateRecord(ctx, st, g.Key, g, nil)
}

// ReadJournalGap reads the gap record at key.
func ReadJournalGap(ctx context.Context, st store.Store, key string) (*JournalGap, error) {
	var g JournalGap
	if err := objectio.ReadRecord(ctx, st, key, &g, objectio.RecordOptions{Max: maxSmallRecordBytes}); err != nil {
		return nil, fmt.Errorf("gap record %s: %w", key, err)
	}
	g.Key = key
	return &g, nil
}

// JournalGapKeys are the keys of clusterID's gap records among objs (a
// listing that holds its journal), in the listing's order.
func (l Layout) JournalGapKeys(clusterID string, objs []store.ObjectInfo) []store.ObjectInfo {
	var out []store.ObjectInfo
	for _, o := range objs {
		if ki := l.Classify(o.Key); ki.Kind == KeyJournalGap && ki.ClusterID == clusterID {
			out = append(out, o)
		}
	}
	return out
}

// ReadJournalGaps reads every gap record of a cluster's journal, in the
// order of their keys (the first revision not captured).
func ReadJournalGaps(ctx context.Context, st store.Store, layout Layout, clusterID string) ([]JournalGap, error) {
	objs, err := st.List(ctx, layout.JournalGapsPrefix(clusterID))
	if err != nil {
		return nil, fmt.Errorf("list the journal gap records of %s: %w", clusterID, err)
	}
	var out []JournalGap
	for _, o := range layout.JournalGapKeys(clusterID, objs) {
		g, err := ReadJournalGap(ctx, st, o.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, *g)
	}
	return out, nil
}
