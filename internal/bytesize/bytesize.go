// Package bytesize is the tool's one parser of sizes: the size flags
// (journal --segment-size and --memory-budget), --cos-min-throughput's
// size and the scratch limit (ETCD_RECOVERY_SCRATCH_LIMIT) all read their
// values with Parse, so "4MiB", "4Mi" and "4194304" mean one thing
// everywhere. It is apimachinery's resource.Quantity with the units people
// write for bytes spelled out:
//
//   - binary, 1024-based: KiB, MiB, GiB, TiB (and Kubernetes's Ki, Mi, Gi, Ti);
//   - decimal, 1000-based: KB (or kB), MB, GB, TB (and Kubernetes's k, M, G, T);
//   - B, or no unit: bytes.
//
// "KB" is 1000 bytes, as in SI and in a Kubernetes quantity ("1k"); 1024
// bytes is "KiB" (or "Ki").
package bytesize

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// units are the byte units that resource.ParseQuantity does not take,
// as the quantity suffix they stand for. Longest first: "KiB" before "B".
var units = []struct{ unit, suffix string }{
	{"KiB", "Ki"}, {"MiB", "Mi"}, {"GiB", "Gi"}, {"TiB", "Ti"},
	{"KB", "k"}, {"kB", "k"}, {"MB", "M"}, {"GB", "G"}, {"TB", "T"},
	{"B", ""},
}

// Forms is what Parse accepts, for the errors of its callers.
const Forms = "bytes, or a number with a unit: KiB, MiB, GiB (1024-based, also Ki, Mi, Gi), KB, MB, GB (1000-based, also k, M, G)"

// Parse reads a size in bytes: a whole, non-negative number of bytes
// ("1.5KiB" is 1536; "0.5" is refused).
func Parse(s string) (int64, error) {
	v := strings.TrimSpace(s)
	num, q := v, v
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.unit); ok {
			num = strings.TrimSpace(n)
			q = num + u.suffix
			break
		}
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: empty: want %s", s, Forms)
	}
	if strings.HasSuffix(q, "m") || strings.HasSuffix(q, "u") || strings.HasSuffix(q, "n") {
		// Kubernetes' milli, micro and nano: "1000m" would be one byte.
		return 0, fmt.Errorf("size %q: bytes have no milli, micro or nano (did you mean Mi or M?): want %s", s, Forms)
	}
	qty, err := resource.ParseQuantity(q)
	if err != nil {
		return 0, fmt.Errorf("size %q: not a size: want %s", s, Forms)
	}
	if qty.Sign() < 0 {
		return 0, fmt.Errorf("size %q: negative", s)
	}
	if qty.Cmp(*resource.NewQuantity(1<<62, resource.BinarySI)) > 0 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	n := qty.Value() // rounded up
	if qty.Cmp(*resource.NewQuantity(n, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return n, nil
}
