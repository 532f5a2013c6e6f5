package journal

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// GapRecord is what `list` shows of a gap record of the journal
// (<prefix>/_journal/<cluster>/gaps/<from>.json, written by the journal
// when it found a gap: revisions From to To, 0 when unknown, that no
// segment holds), next to the window's holes.
type GapRecord struct {
	Key    string    `json:"key"`
	From   int64     `json:"from"`
	To     int64     `json:"to,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Error  string    `json:"error,omitempty"`
	Time   time.Time `json:"time,omitzero"`
	// ReadError says why the record could not be read (From comes from
	// its key then).
	ReadError string `json:"readError,omitempty"`
}

// MaxGapRecords bounds the gap records `list` reads: the newest ones.
const MaxGapRecords = 10

// gapReadTimeout bounds the read of one gap record.
const gapReadTimeout = 10 * time.Second

// ReadGapRecords reads the newest (by first revision not captured) gap
// records of clusterID among objs (a listing of its journal prefix), at
// most MaxGapRecords, oldest first; a record that cannot be read is
// returned with ReadError, never failing the caller. total is how many
// records the listing holds.
func ReadGapRecords(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string, objs []store.ObjectInfo) (out []GapRecord, total int) {
	for _, o := range objs {
		if ki := layout.Classify(o.Key); ki.Kind == catalog.KeyJournalGap && ki.ClusterID == clusterID {
			out = append(out, GapRecord{Key: o.Key, From: ki.FirstRev, Time: o.LastModified})
		}
	}
	total = len(out)
	slices.SortFunc(out, func(a, b GapRecord) int { return int(min(max(a.From-b.From, -1), 1)) })
	if len(out) > MaxGapRecords {
		out = out[len(out)-MaxGapRecords:]
	}
	for i := range out {
		g := &out[i]
		if err := readGap(ctx, st, g); err != nil {
			g.ReadError = err.Error()
		}
	}
	return out, total
}

func readGap(ctx context.Context, st store.Store, g *GapRecord) error {
	ctx, cancel := context.WithTimeout(ctx, gapReadTimeout)
	defer cancel()
	rec, err := catalog.ReadJournalGap(ctx, st, g.Key)
	if err != nil {
		return err
	}
	g.To, g.Reason, g.Error = rec.To, rec.Reason, rec.Error
	if !rec.Time.IsZero() {
		g.Time = rec.Time
	}
	return nil
}

// gapLine is a gap record in a WINDOW line.
func gapLine(g GapRecord) string {
	to := "the backup that healed it"
	if g.To > 0 {
		to = fmt.Sprint(g.To)
	}
	s := fmt.Sprintf("WINDOW gap: revisions %d to %s, found %s", g.From, to, fmtWhen(g.Time))
	switch {
	case g.ReadError != "":
		s += " (record not read: " + g.ReadError + ")"
	case g.Reason != "":
		s += ": " + g.Reason
		if g.Error != "" {
			s += " (" + g.Error + ")"
		}
	}
	return s
}
