package main

import (
	"github.com/urfave/cli/v2"
)

// etcdBinDirFlag is where a drill finds the etcd servers it runs (backup
// --drill, drill): one name, one meaning on every command.
func etcdBinDirFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "etcd-bin-dir", EnvVars: []string{"ETCD_RECOVERY_ETCD_BIN_DIR"}, TakesFile: true, Destination: dest,
		Usage: "directory holding the etcd servers a drill runs, named etcd-<minor> (etcd-3.5, etcd-3.6); " +
			"default: etcd-<minor> in $PATH (the image ships /usr/local/bin/etcd-3.5 and etcd-3.6)"}
}
