package main

import "github.com/urfave/cli/v2"

// inspectCommand is wired in a later change.
func inspectCommand() *cli.Command { return &cli.Command{Name: "inspect", Hidden: true} }
