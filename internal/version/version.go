// Package version holds the tool's version, set at link time:
//
//	go build -ldflags "-X github.com/armada/etcd-recovery/internal/version.Version=v1.2.3"
package version

// Version is the tool's version. "dev" when built without ldflags.
var Version = "dev"
