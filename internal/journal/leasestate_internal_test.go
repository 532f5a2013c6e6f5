package journal

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lookup is gone only when etcd does not hold the lease (TTL -1, no
// granted TTL: v3rpc's answer to ErrLeaseNotFound). A lease past its
// expiry whose revoke is not applied yet answers what remains of it,
// rounded to 0 or -1, with its granted TTL: taken as gone, its revoke
// would be placed at a delete before the revoke's own.
func TestLeaseStateOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl, granted int64
		want         int
	}{
		{-1, 0, leaseGone},
		{-1, 30, leaseExpiring},
		{0, 30, leaseExpiring},
		{1, 30, leaseAlive},
		{3600, 3600, leaseAlive},
	} {
		got := leaseStateOf(&clientv3.LeaseTimeToLiveResponse{TTL: tc.ttl, GrantedTTL: tc.granted})
		if got != tc.want {
			t.Errorf("TTL %d, granted %d: state %d, want %d", tc.ttl, tc.granted, got, tc.want)
		}
	}
}
