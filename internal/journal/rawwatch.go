package journal

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The capture's watch is etcd's Watch RPC on a stream of its own, read one
// message at a time, not clientv3's Watch. With WithFragment etcd splits a
// response larger than its request limit (1.5 MiB by default) into
// fragments, and clientv3 joins them before it delivers the response: a
// catch-up response holds up to 1,000 revisions (etcd's watch batch), so
// a catch-up of large values was held whole, with its previous values
// (one of 52 MiB raised the journal's RSS from 51 to 232 MiB, and 100
// clusters catching up at once after a leader change would hold 100 of
// them). Read fragment by fragment, a watch holds one fragment at a time:
// the capture buffers its events and cuts segments at revision ends as
// before, and never seals a revision a later fragment continues
// (capture.partial). While the capture does not read (an upload it waits
// for), gRPC's flow control stops the stream: nothing piles up here.
//
// The stream's progress requests go on the same stream (requestProgress),
// as clientv3's RequestProgress did on the watch's own stream.

// watchResp is one message of the capture's watch: a response, or a
// fragment of one (Partial: more fragments of the same response follow,
// so its last revision may be incomplete), or the stream's end (CloseErr:
// the stream broke on the client's side, a transport error or a message
// over the receive limit; etcd still holds every revision).
type watchResp struct {
	clientv3.WatchResponse
	Partial      bool
	CancelReason string
	CloseErr     error
}

// err says why the watch ended, if it did.
func (r watchResp) err() error {
	switch {
	case r.CloseErr != nil:
		return r.CloseErr
	case r.Canceled && r.CancelReason != "":
		return errors.New(r.CancelReason)
	}
	return r.WatchResponse.Err()
}

// watchChan delivers a watch's messages; it is closed once the watch's
// context ends (after a CloseErr or a cancel message, nothing follows).
type watchChan <-chan watchResp

// watchRecvLimit bounds one message of the watch (a fragment is about
// etcd's request limit; an event larger than it is a fragment of its own).
const watchRecvLimit = 64 << 20

// slowSends holds, per client, a test's stand-in for a member slow to send
// (export_test.go): it runs before each message of that client's watches
// is delivered. Empty outside tests.
var slowSends sync.Map // *clientv3.Client → func(ctx context.Context, events []*mvccpb.Event)

func slowSend(ctx context.Context, cli *clientv3.Client, events []*mvccpb.Event) {
	if f, ok := slowSends.Load(cli); ok {
		f.(func(context.Context, []*mvccpb.Event))(ctx, events)
	}
}

// rawWatch is the send side of a watch's stream: the create request, then
// progress requests, one at a time.
type rawWatch struct {
	mu     sync.Mutex
	stream pb.Watch_WatchClient
}

func (w *rawWatch) send(r *pb.WatchRequest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stream == nil {
		return errors.New("the watch's stream is not open yet")
	}
	return w.stream.Send(r)
}

// requestProgress asks the watch's stream for a progress notification
// (answered with the revision its member has sent everything up to).
func (w *rawWatch) requestProgress() error {
	return w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
}

// openRawWatch opens the watch of every key from revision from, with
// previous values, progress notifications and fragments, on a stream of
// its own over cli's connection (its balancer picks the member), and
// forwards its messages one at a time until wctx ends. Opening waits for
// a member to be ready (as clientv3 does); the caller's liveness check
// judges a watch that is never created.
func openRawWatch(wctx context.Context, cli *clientv3.Client, from int64) (watchChan, *rawWatch) {
	out := make(chan watchResp)
	rw := &rawWatch{}
	go func() {
		defer close(out)
		deliver := func(r watchResp) bool {
			select {
			case out <- r:
				return true
			case <-wctx.Done():
				return false
			}
		}
		closed := func(err error) {
			if wctx.Err() == nil {
				deliver(watchResp{WatchResponse: clientv3.WatchResponse{Canceled: true}, CloseErr: rpctypes.Error(err)})
			}
		}
		stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(wctx, grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(watchRecvLimit))
		if err != nil {
			closed(err)
			return
		}
		rw.mu.Lock()
		rw.stream = stream
		rw.mu.Unlock()
		create := &pb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: from, ProgressNotify: true, PrevKv: true, Fragment: true}
		if err := rw.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			closed(err)
			return
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				closed(err)
				return
			}
			r := watchResp{WatchResponse: clientv3.WatchResponse{CompactRevision: m.CompactRevision, Created: m.Created, Canceled: m.Canceled},
				Partial: m.Fragment, CancelReason: m.CancelReason}
			if m.Header != nil {
				r.Header = *m.Header
			}
			if len(m.Events) > 0 {
				r.Events = make([]*clientv3.Event, len(m.Events))
				for i, ev := range m.Events {
					r.Events[i] = (*clientv3.Event)(ev)
				}
			}
			slowSend(wctx, cli, m.Events)
			if !deliver(r) || m.Canceled {
				return
			}
		}
	}()
	return out, rw
}
