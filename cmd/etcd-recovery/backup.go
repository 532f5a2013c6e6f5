package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/kube"
	"github.com/armada/etcd-recovery/internal/output"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "stream a verified v3 snapshot and the v2 keys of one cluster (or of EtcdClusters: --all, --cluster) to COS",
		Description: "With --cluster-id and the etcd flags: one cluster.\n" +
			"With --all or --cluster NAME (repeatable): the EtcdClusters (etcd-operator) of a Kubernetes namespace,\n" +
			"--parallel at a time; endpoints, client TLS (the operator secret) and, unless mounted, the\n" +
			"cos-credentials secret come from the API. The cluster id in COS is the EtcdCluster's name.\n" +
			"One failure does not stop the others; each outcome is an Event on its EtcdCluster; the exit is 1\n" +
			"when any failed, naming them.",
		Flags: concat(etcdFlags(), cosFlags(), kubeFlags(), []cli.Flag{
			clusterIDFlag(),
			allFlag(),
			&cli.StringSliceFlag{Name: "cluster", Usage: clusterFlagUsage},
			parallelFlag(),
			&cli.BoolFlag{Name: "no-events", Usage: "with --all/--cluster: do not record Kubernetes Events"},
			&cli.StringFlag{Name: "kind", Value: "manual", Usage: "scheduled, update or manual"},
			&cli.StringFlag{Name: "v2", Value: "auto", Usage: "export the v2 keyspace: auto (when served), on (required) or off"},
			&cli.StringFlag{Name: "compress", Value: "zstd", Usage: "zstd or none"},
			probeTimeoutFlag(),
			&cli.BoolFlag{Name: "prune", Usage: "once the backup is committed, apply the retention policy to the cluster (see prune)"},
			outputFlag(),
		}, policyFlags()),
		Action: runBackup,
	}
}

func runBackup(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	opts := backup.Options{ClusterID: c.String("cluster-id"), ProbeTimeout: c.Duration("probe-timeout"), Log: log}
	fleet := c.Bool("all") || len(c.StringSlice("cluster")) > 0
	switch {
	case c.Bool("all") && len(c.StringSlice("cluster")) > 0:
		return usagef("backup: --all and --cluster are exclusive")
	case fleet && opts.ClusterID != "":
		return usagef("backup: --cluster-id is for one cluster given by --endpoints; with --all/--cluster the id is the EtcdCluster's name")
	case fleet && c.Int("parallel") < 1:
		return usagef("backup: --parallel %d: want at least 1", c.Int("parallel"))
	}
	if !fleet && opts.ClusterID == "" {
		return usagef("backup: --cluster-id is required")
	}
	if !fleet {
		if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
			return usageError{err}
		}
	}
	if opts.Kind, err = backup.ParseKind(c.String("kind")); err != nil || opts.Kind == backup.KindPreRestore {
		return usagef("backup: --kind %q: want scheduled, update or manual", c.String("kind"))
	}
	if opts.V2, err = backup.ParseV2Mode(c.String("v2")); err != nil {
		return usageError{err}
	}
	if opts.Compression, err = backup.ParseCompression(c.String("compress")); err != nil {
		return usageError{err}
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	if c.Bool("prune") {
		policy, err := policyFromFlags(c)
		if err != nil {
			return err
		}
		opts.Prune = &policy
	}
	if fleet {
		return runBackupAll(c, opts, format)
	}
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	prog := output.NewProgress(fmt.Sprintf("backup %s", opts.ClusterID))
	opts.Progress = prog.Update
	res, err := backup.Run(c.Context, opts)
	prog.Done()
	if res == nil {
		return err
	}
	// A committed backup is printed even when the prune after it failed.
	m := res.Manifest
	t := backupTable(m, res.Duration)
	if res.Pruned == nil {
		if rerr := output.Render(c.App.Writer, format, t, m); rerr != nil {
			return rerr
		}
		return err
	}
	if format == output.FormatJSON {
		// The manifest, as without --prune, plus the prune report.
		data := struct {
			*backup.Manifest
			Pruned *backup.PruneReport `json:"pruned"`
		}{m, res.Pruned}
		if rerr := output.Render(c.App.Writer, format, t, data); rerr != nil {
			return rerr
		}
		return err
	}
	if rerr := output.Render(c.App.Writer, format, t, m); rerr != nil {
		return rerr
	}
	fmt.Fprintln(c.App.Writer)
	if rerr := renderPrune(c, format, res.Pruned); rerr != nil {
		return rerr
	}
	return err
}

// backupTable is backup's result: STORED is the snapshot object's size as
// stored, as in list.
func backupTable(m *backup.Manifest, d time.Duration) output.Table {
	return output.Table{
		Header: []string{"CLUSTER", "BACKUP", "REVISION", "RAW", "STORED", "V2 KEYS", "SOURCE", "DURATION"},
		Wide:   []string{"CLUSTER", "SOURCE"},
		Rows: [][]string{{m.ClusterID, m.Name, fmt.Sprint(m.RevisionBefore), output.Bytes(m.Snapshot.RawSize),
			output.Bytes(m.Snapshot.StoredSize), v2Keys(m), m.Source.Name, d.Round(time.Millisecond).String()}},
	}
}

func v2Keys(m *backup.Manifest) string {
	if m.V2 == nil {
		return "-"
	}
	return fmt.Sprint(m.V2.Keys)
}

// runBackupAll backs up EtcdClusters found through the Kubernetes API.
func runBackupAll(c *cli.Context, tmpl backup.Options, format output.Format) error {
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStoreKube(c, k)
	if err != nil {
		return err
	}
	tmpl.Store, tmpl.Layout = store, layout
	rep, err := kube.BackupAll(c.Context, kube.BackupAllOptions{
		Kube:        k,
		Names:       c.StringSlice("cluster"),
		Parallel:    c.Int("parallel"),
		Template:    tmpl,
		DialTimeout: c.Duration("dial-timeout"),
		NoEvents:    c.Bool("no-events"),
		Log:         tmpl.Log,
	})
	if rep != nil && rep.Clusters != nil {
		if rerr := output.Render(c.App.Writer, format, rep.Table(), rep); rerr != nil {
			return rerr
		}
	}
	return err
}
