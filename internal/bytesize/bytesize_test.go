package bytesize

import (
	"strings"
	"testing"
)

// KiB is 1024 bytes and KB 1000, explicitly; the Kubernetes quantity
// forms and bare bytes mean what they mean in a manifest.
func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0":          0,
		"1048576":    1 << 20,
		"512B":       512,
		"1KiB":       1024,
		"1 KiB":      1024,
		"1KB":        1000,
		"1kB":        1000,
		"1k":         1000,
		"1Ki":        1024,
		"4MiB":       4 << 20,
		"4Mi":        4 << 20,
		"4MB":        4_000_000,
		"4M":         4_000_000,
		"64KiB":      64 << 10,
		"64KB":       64_000,
		"10Gi":       10 << 30,
		"10GiB":      10 << 30,
		"10GB":       10_000_000_000,
		"2TiB":       2 << 40,
		"1.5KiB":     1536,
		"1.5Gi":      3 << 29,
		"1e3":        1000,
		" 128MiB ":   128 << 20,
		"500M":       500_000_000,
		"1073741824": 1 << 30,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":          "empty",
		"B":         "empty",
		"KiB":       "empty",
		"4MiBs":     "not a size",
		"4 mib":     "not a size",
		"four":      "not a size",
		"4Kb":       "not a size",
		"-1KiB":     "negative",
		"0.5":       "not a whole number of bytes",
		"1.0001KiB": "not a whole number of bytes",
		"16EiB":     "too large",
		"9e30":      "too large",
		"1000m":     "bytes have no milli",
		"4m":        "did you mean Mi or M?",
		"5u":        "bytes have no milli",
		"7n":        "bytes have no milli",
	} {
		got, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("Parse(%q) = %d, %v; want an error naming it: %s", in, got, err, why)
		}
	}
}
