package cos

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/bytesize"
)

// Throughput is a minimum rate: Bytes in every Window of a call's waiting
// on the store (Config.MinThroughput). Written and parsed as
// "<size>/<window>", e.g. "64KiB/60s".
type Throughput struct {
	Bytes  int64
	Window time.Duration
}

// DefaultMinThroughput is Config.MinThroughput's default: 64 KiB in any
// 60 s a call waits on the store. A healthy store moves that in well under
// a second; a store that trickles less is stalled, where the no-progress
// rule alone would wait on it for hours.
var DefaultMinThroughput = Throughput{Bytes: 64 << 10, Window: 60 * time.Second}

// NoMinThroughput turns the rule off (Config.MinThroughput; "off" or "0"
// on the command line).
var NoMinThroughput = Throughput{Bytes: -1}

func (t Throughput) enabled() bool { return t.Bytes > 0 && t.Window > 0 }

// String is "64KiB/60s", or "off".
func (t Throughput) String() string {
	if !t.enabled() {
		return "off"
	}
	return formatBytes(t.Bytes) + "/" + formatWindow(t.Window)
}

// formatWindow writes whole seconds as "60s", anything else as Go does.
func formatWindow(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// ParseThroughput reads "<size>/<window>": a size in bytes with an
// optional unit (internal/bytesize: KiB, MiB, GiB are 1024-based, KB,
// MB, GB 1000-based), and a Go duration of at least 1s ("64KiB/60s", "1MiB/2m").
// "off" and "0" disable the rule (NoMinThroughput).
func ParseThroughput(s string) (Throughput, error) {
	v := strings.TrimSpace(s)
	if v == "off" || v == "0" {
		return NoMinThroughput, nil
	}
	bad := func(why string) (Throughput, error) {
		return Throughput{}, fmt.Errorf("minimum throughput %q: %s: want <size>/<window>, e.g. 64KiB/60s, or off", s, why)
	}
	size, win, ok := strings.Cut(v, "/")
	if !ok {
		return bad("no window")
	}
	n, err := bytesize.Parse(size)
	if err != nil {
		return bad(err.Error())
	}
	d, err := time.ParseDuration(strings.TrimSpace(win))
	if err != nil {
		return bad("window: " + err.Error())
	}
	switch {
	case n <= 0:
		return bad("the size must be positive")
	case d < time.Second:
		return bad("the window must be at least 1s")
	}
	return Throughput{Bytes: n, Window: d}, nil
}

var byteUnits = []struct {
	suffix string
	mult   int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// formatBytes writes n in the largest binary unit that keeps it whole,
// else with one decimal: "64KiB", "1.5MiB", "300B".
func formatBytes(n int64) string {
	for _, u := range byteUnits {
		if n >= u.mult {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
