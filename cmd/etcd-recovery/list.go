package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
)

const defaultProbeTimeout = 3 * time.Second

func listCommand() *cli.Command {
	return &cli.Command{
		Name: "list",
		Usage: "list a cluster's backups, newest first, with each one's state (committed, incomplete, damaged), " +
			"its restore drill (passed, FAILED, never, unreadable; what it restored) and why retention keeps or deletes it; " +
			"with --identity-file, whether the identity opens each encrypted backup (DECRYPTS)",
		Flags:  concat(cosFlags(), []cli.Flag{clusterIDFlag(), outputFlag(), timeoutFlag(), identityFileFlag()}, policyFlags()),
		Action: runList,
	}
}

// noArgs refuses stray positional arguments (exit 4).
func noArgs(c *cli.Context) error {
	if c.Args().Present() {
		return usagef("%s: unexpected argument %q (this command takes flags only)", c.Command.Name, c.Args().First())
	}
	return nil
}

// runDeadline is the command's context bounded by --timeout, and a function
// that names the step and the limit when err is that deadline.
func runDeadline(c *cli.Context) (context.Context, context.CancelFunc, func(step string, err error) error, error) {
	d := c.Duration("timeout")
	if d <= 0 {
		return nil, nil, nil, usagef("--timeout must be positive, got %v", d)
	}
	ctx, cancel := context.WithTimeout(c.Context, d)
	named := func(step string, err error) error {
		if err != nil && ctx.Err() == context.DeadlineExceeded && c.Context.Err() == nil {
			return fmt.Errorf("%s: timed out after %s (--timeout) at step %q: %w", c.Command.Name, d, step, err)
		}
		return err
	}
	return ctx, cancel, named, nil
}

func runList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return asUsage(err)
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	opts := catalog.ListOptions{ClusterID: c.String("cluster-id")}
	if opts.Policy, err = policyFromFlags(c); err != nil {
		return err
	}
	if opts.Identities, err = identityFromFlags(c); err != nil {
		return err
	}
	if opts.Identities == nil && c.String("identity-file") != "" {
		// The toolkit's mount is empty (the secret never reached the
		// namespace): every encrypted backup shows that no identity
		// opens it.
		opts.Identities = &seal.Identities{}
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.Store, opts.Layout, err = cosStore(c); err != nil {
		return err
	}
	ctx, cancel, named, err := runDeadline(c)
	if err != nil {
		return err
	}
	defer cancel()
	res, err := catalog.List(ctx, opts)
	if err != nil {
		var le *catalog.ListError
		if errors.As(err, &le) {
			return named(le.Step(), err)
		}
		return err
	}
	if len(res.Staged) > 0 {
		keys := make([]string, len(res.Staged))
		for i, s := range res.Staged {
			keys[i] = s.Key
		}
		log.Warn("staged plaintext snapshots exist", "cluster", opts.ClusterID, "keys", keys)
	}
	if res.StagedErr != nil {
		log.Warn("staged plaintext snapshots could not be listed", "cluster", opts.ClusterID, "err", res.StagedErr)
	}
	if len(res.Unknown) > 0 {
		log.Warn("keys not in the layout, left alone", "cluster", opts.ClusterID, "count", len(res.Unknown), "keys", res.Unknown)
	}
	if err := output.RenderAll(c.App.Writer, format, res.Tables(), res.Rows); err != nil {
		return err
	}
	if res.Err != nil {
		// Shown in the table: the state of those backups, or their
		// proof, is unknown.
		return res.Err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return named("render", ctx.Err())
	}
	return nil
}
