package journal

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SlowSends makes every watch a capture opens through cli run f before
// each of its messages is delivered (events: how many the message holds),
// as a member slow to send them would; the returned func undoes it.
func SlowSends(cli *clientv3.Client, f func(ctx context.Context, events int)) (undo func()) {
	slowSends.Store(cli, f)
	return func() { slowSends.Delete(cli) }
}
