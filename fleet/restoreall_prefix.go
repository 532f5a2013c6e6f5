package fleet

import "fmt"

// nothingSelected is the error of a namespace in which the run selects
// nothing at all and whose prefix holds no cluster id: the prefix is
// almost surely the wrong one (a --prefix or COS_PREFIX of another
// namespace, a --prefix-template that does not match the chart's), and
// a --rebuild of a namespace that is gone would plan nothing and succeed
// with an empty report. nil when anything is selected, or when the
// prefix has cluster ids (the selection matched none of them: an empty
// report is the honest answer).
func nothingSelected(ns *raNamespace) error {
	if len(ns.clusters) > 0 || len(ns.folders) > 0 {
		return nil
	}
	where := fmt.Sprintf("prefix %q", ns.Layout.RootPrefix())
	if ns.Layout.RootPrefix() == "" {
		where = `the bucket's root (prefix "")`
	}
	return fmt.Errorf("nothing to restore: no EtcdCluster selected and no cluster id with backups under %s; "+
		"check the prefix (--prefix or COS_PREFIX with one namespace, --prefix-template with several)", where)
}
