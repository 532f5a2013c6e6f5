package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// writeGap writes the gap's record at g.Key, create-only: a record there
// already is store.ErrExists (the same gap found again by a restart). A
// store without conditional creates is asked first (a race between two
// writers of one cluster is the fence's to prevent).
func writeGap(ctx context.Context, st store.Store, g JournalGap) error {
	b, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if cs, ok := st.(store.Conditional); ok {
		_, err = cs.PutIfAbsent(ctx, g.Key, bytes.NewReader(b))
		return err
	}
	body, err := st.Get(ctx, g.Key)
	switch {
	case err == nil:
		body.Close()
		return fmt.Errorf("%s: %w", g.Key, store.ErrExists)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	_, err = st.Put(ctx, g.Key, bytes.NewReader(b))
	return err
}

// JournalGaps reads the gap records of a cluster's journal, oldest gap
// first (by the first revision not captured).
func JournalGaps(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string) ([]JournalGap, error) {
	objs, err := st.List(ctx, layout.JournalPrefix(clusterID))
	if err != nil {
		return nil, fmt.Errorf("listing the journal of %s: %w", clusterID, err)
	}
	var out []JournalGap
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournalGap || ki.ClusterID != clusterID {
			continue
		}
		body, err := st.Get(ctx, o.Key)
		if err != nil {
			return nil, fmt.Errorf("reading the gap record %s: %w", o.Key, err)
		}
		b, err := io.ReadAll(io.LimitReader(body, 1<<20))
		body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the gap record %s: %w", o.Key, err)
		}
		var g JournalGap
		if err := json.Unmarshal(b, &g); err != nil {
			return nil, fmt.Errorf("the gap record %s: %w", o.Key, err)
		}
		g.Key = o.Key
		out = append(out, g)
	}
	return out, nil
}
