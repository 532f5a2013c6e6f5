package backup

import (
	"fmt"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// V2Mode is --v2: export the v2 keyspace when served (auto), always (on)
// or never (off).
type V2Mode string

const (
	V2Auto V2Mode = "auto"
	V2On   V2Mode = "on"
	V2Off  V2Mode = "off"
)

// ParseV2Mode validates --v2.
func ParseV2Mode(s string) (V2Mode, error) {
	switch V2Mode(s) {
	case V2Auto, V2On, V2Off:
		return V2Mode(s), nil
	}
	return "", fmt.Errorf("unknown --v2 mode %q (want auto, on or off)", s)
}

// ErrV2Unavailable means the member does not serve the v2 API (etcd 3.6, or
// 3.4/3.5 without --enable-v2): catalog.ErrV2Unavailable, which
// catalog.ExportV2 returns (the v2 export document and its reading live in
// internal/catalog/v2export.go).
var ErrV2Unavailable = catalog.ErrV2Unavailable
