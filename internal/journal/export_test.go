package journal

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// SlowSends makes every watch a capture opens through cli run f before
// each of its messages is delivered (events: the message's), as a member
// slow to send them would; the returned func undoes it.
func SlowSends(cli *clientv3.Client, f func(ctx context.Context, events []*mvccpb.Event)) (undo func()) {
	slowSends.Store(cli, f)
	return func() { slowSends.Delete(cli) }
}
