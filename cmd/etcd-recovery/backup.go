package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "stream a verified v3 snapshot and the v2 keys of one cluster to COS",
		Flags: concat(etcdFlags(), cosFlags(), []cli.Flag{
			clusterIDFlag(),
			&cli.StringFlag{Name: "kind", Value: "manual", Usage: "scheduled, update or manual"},
			&cli.StringFlag{Name: "v2", Value: "auto", Usage: "export the v2 keyspace: auto (when served), on (required) or off"},
			&cli.StringFlag{Name: "compress", Value: "zstd", Usage: "zstd or none"},
			&cli.DurationFlag{Name: "probe-timeout", Value: defaultProbeTimeout, Usage: "bound on each member probe"},
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
	if opts.ClusterID == "" {
		return usagef("backup: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
		return usageError{err}
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
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	if c.Bool("prune") {
		policy, err := policyFromFlags(c)
		if err != nil {
			return err
		}
		opts.Prune = &policy
	}
	prog := output.NewProgress(fmt.Sprintf("backup %s", opts.ClusterID))
	opts.Progress = prog.Update
	res, err := backup.Run(c.Context, opts)
	prog.Done()
	if res == nil {
		return err
	}
	// A committed backup is printed even when the prune after it failed.
	m := res.Manifest
	t := output.Table{
		Header: []string{"CLUSTER", "BACKUP", "REVISION", "RAW", "STORED", "V2 KEYS", "SOURCE", "DURATION"},
		Rows: [][]string{{m.ClusterID, m.Name, fmt.Sprint(m.RevisionBefore), output.Bytes(m.Snapshot.RawSize),
			output.Bytes(m.Snapshot.StoredSize), v2Keys(m), m.Source.Name, res.Duration.Round(1e6).String()}},
	}
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

func v2Keys(m *backup.Manifest) string {
	if m.V2 == nil {
		return "-"
	}
	return fmt.Sprint(m.V2.Keys)
}
