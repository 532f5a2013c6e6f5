package fleet

import "github.com/armada/etcd-recovery/internal/output"

// Tables are the fleet's table, then the orphan pass's when it found any.
func (r *BackupAllReport) Tables() []output.Table {
	out := []output.Table{r.Table()}
	if r.Orphans != nil && len(r.Orphans.Orphans) > 0 {
		out = append(out, r.Orphans.Table())
	}
	return out
}
