package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
)

func deleteCommand() *cli.Command {
	return &cli.Command{
		Name:  "delete",
		Usage: "delete named backups of one cluster, of any kind (manifest first)",
		Description: "The only way manual and pre-restore backups are deleted. Names that do not exist, and the\n" +
			"newest committed backup that checks out or the newest whose restore drill passed (without --allow-newest), are refused before anything is deleted.",
		Flags: concat(cosFlags(), []cli.Flag{
			clusterIDFlag(),
			&cli.StringSliceFlag{Name: "backup", Usage: backupFlagUsage},
			&cli.BoolFlag{Name: "allow-newest", Usage: "allow deleting the newest committed backup that checks out, or the newest whose restore drill passed"},
			outputFlag(),
			timeoutFlag(),
		}, deprecatedFlagsOf("delete")),
		Action: runDelete,
	}
}

func runDelete(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	opts := backup.DeleteOptions{ClusterID: c.String("cluster-id"), Names: c.StringSlice("backup"), Force: c.Bool("allow-newest"), Log: log}
	if opts.ClusterID == "" {
		return usagef("delete: --cluster-id is required")
	}
	if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
		return usageError{err}
	}
	if len(opts.Names) == 0 {
		return usagef("delete: --backup is required")
	}
	for _, n := range opts.Names {
		if _, _, err := backup.ParseBackupName(n); err != nil {
			return usagef("delete: --backup: %v", err)
		}
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	rep, err := backup.Delete(ctx, opts)
	err = named("delete", err)
	if errors.Is(err, backup.ErrNewestBackup) || errors.Is(err, backup.ErrNewestProven) {
		err = fmt.Errorf("%w: pass --allow-newest", err)
	}
	if rep != nil {
		var rows [][]string
		for _, a := range rep.Backups {
			rows = append(rows, backupRow(a))
		}
		t := pruneTableOf(rows)
		if rerr := output.Render(c.App.Writer, format, t, rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}
