package main

import "github.com/urfave/cli/v2"

// deleteCommand is wired in a later change.
func deleteCommand() *cli.Command { return &cli.Command{Name: "delete", Hidden: true} }
