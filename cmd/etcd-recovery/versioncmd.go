package main

import (
	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/drill"
)

// versionOpts are version's flags.
type versionOpts struct {
	etcdBinDir, output string
}

func versionCommand(g *globalOpts) *cli.Command {
	o := &versionOpts{}
	return &cli.Command{
		Name:  "version",
		Usage: "print the tool's version, the Go and library versions it was built with, and the etcd servers a drill would run",
		Description: "The versions of the linked etcd client, etcdutl and server modules, client-go, the Prometheus client and\n" +
			"the table writer come from the binary's build information. For each etcd minor version a drill runs\n" +
			"(etcd-3.5, etcd-3.6), the server found in --etcd-bin-dir (else $PATH) is asked its version\n" +
			"(`--version`, at most 5 s each); one missing or of the wrong version is listed with why, and is not an error.",
		Flags: []cli.Flag{
			etcdBinDirFlag(&o.etcdBinDir),
			outputFlag(&o.output),
		},
		Action: func(c *cli.Context) error {
			e, err := newEnv(c, g, o.output)
			if err != nil {
				return err
			}
			rep := drill.VersionReport(e.ctx(), o.etcdBinDir)
			return e.renderAll(rep.Tables(), rep)
		},
	}
}
