package main

import "github.com/urfave/cli/v2"

// pruneCommand is wired in a later change.
func pruneCommand() *cli.Command { return &cli.Command{Name: "prune", Hidden: true} }
