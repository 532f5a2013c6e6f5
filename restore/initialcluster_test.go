package restore_test

import (
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/restore"
)

// A bad --initial-cluster is named by its entry and what is wrong with
// it, with the form it takes, never the URL parser's raw error, and never
// with a password in it; etcd's forms are accepted.
func TestInitialClusterErrorsNameTheEntry(t *testing.T) {
	t.Parallel()
	const form = "want name=https://host:2380[,name=https://host:2380...]"
	cases := []struct{ ic, want string }{
		{"m0=https://10.0.0.1:2380,", `entry 2 "": empty (a stray comma?)`},
		{"https://10.0.0.1:2380", `entry 1 "https://10.0.0.1:2380": no "=" between the member's name and its peer URL`},
		{"m0=https://10.0.0.1:2380,m1 https://10.0.0.2:2380", `entry 2 "m1 https://10.0.0.2:2380": no "="`},
		{"=https://10.0.0.1:2380", `no member name before "="`},
		{"m0=", `entry 1 "m0=": no peer URL after "="`},
		{"m0=10.0.0.1:2380", `peer URL "10.0.0.1:2380" has no scheme (https:// or http://)`},
		{"m0=ftp://10.0.0.1:2380", `scheme "ftp" (want https or http)`},
		{"m0=https://10.0.0.1", `peer URL "https://10.0.0.1" has no port (etcd's peer port is 2380)`},
		{"m0=https://:2380", `peer URL "https://:2380" has no host`},
		{"m0=https://10.0.0.1:2380/peers", `has something after the port`},
		{"m0=https://10.0.0.1:2380/", `peer URL "https://10.0.0.1:2380/" has something after the port`},
		{"m0=https://10.0.0.1:99999", `port "99999" is not a port`},
		{"m0=https://10.0.0.1:2380:2380", `is not a URL`},
		{"m0=https://u:s3cret@10.0.0.1:2380", `entry 1 "m0=https://REDACTED@10.0.0.1:2380": the peer URL holds user info`},
		// A password with "/", "?" or "#": the URL does not parse, and
		// the password is still never shown.
		{"m0=https://admin:s3cret/x@10.0.0.1:2380", `entry 1 "m0=https://REDACTED@10.0.0.1:2380"`},
		{"m0=https://admin:s3cret?x@10.0.0.1:2380", `entry 1 "m0=https://REDACTED@10.0.0.1:2380"`},
		{"m0=https://admin:s3cret#x@10.0.0.1:2380", `entry 1 "m0=https://REDACTED@10.0.0.1:2380"`},
		{"m0=https://10.0.0.1:2380,m1=https://a:b@s3cret/@10.0.0.2", `entry 2 "m1=https://REDACTED@10.0.0.2"`},
	}
	for _, tc := range cases {
		_, err := restore.ValidateTargets(restore.Targets{InitialCluster: tc.ic, DataDirRoot: "/tmp/r"})
		if err == nil {
			t.Errorf("%q accepted", tc.ic)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "--initial-cluster: ") || !strings.Contains(msg, tc.want) || !strings.Contains(msg, form) {
			t.Errorf("%q: %v\nwant it to say %q and %q", tc.ic, err, tc.want, form)
		}
		for _, raw := range []string{"parse ", "missing port", "s3cret", "URL scheme must be"} {
			if strings.Contains(msg, raw) {
				t.Errorf("%q: %v: holds %q", tc.ic, err, raw)
			}
		}
	}
	for _, ic := range []string{"m0=https://10.0.0.1:2380", "m0=https://10.0.0.1:2380,m1=http://[::1]:2380, m2=https://etcd-2.example:2380",
		"m0=https://10.0.0.1:2380,m0=https://10.0.0.9:2380"} {
		if _, err := restore.ValidateTargets(restore.Targets{InitialCluster: ic, DataDirRoot: "/tmp/r"}); err != nil {
			t.Errorf("%q refused: %v", ic, err)
		}
	}
}
