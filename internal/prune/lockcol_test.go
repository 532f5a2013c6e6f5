package prune

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// list's LOCKED UNTIL column still fits the default table's width with
// the widest cells of the other columns.
func TestListLockColumnWidth(t *testing.T) {
	now := time.Now().UTC()
	at := now.Add(-3 * time.Hour)
	v2 := 123456
	row := ListRow{Name: "20261120T031500.123Z-scheduled-0a1b2c3e", Kind: catalog.KindPreRestore, Time: now, Status: "overwritten", Overwritten: true,
		Revision: 123456789012, RawSize: 8 << 30, StoredSize: 3 << 30, TotalSize: 3 << 30, V2Keys: &v2, Source: "a-long-member-name",
		Drill: &catalog.DrillResult{At: &at, Failed: "hashkv differs"}, Lock: &RowLock{Mode: "compliance", Until: now.Add(1000 * time.Hour)},
		Retention: ListRetention{Keep: true, Reason: "x"}, lockColumn: true}
	rows := ListRows{row}
	var buf bytes.Buffer
	if err := output.Render(&buf, output.FormatTable, rows.Table(), rows); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(buf.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > output.Width {
			t.Errorf("a line of %d runes (max %d):\n%s", n, output.Width, buf.String())
			break
		}
	}
	if !strings.Contains(buf.String(), "locked until") || !strings.Contains(buf.String(), "OVERWRITTEN") {
		t.Errorf("no lock in the reason, or no OVERWRITTEN:\n%s", buf.String())
	}
	buf.Reset()
	if err := output.Render(&buf, output.FormatWide, rows.Table(), rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "LOCKED UNTIL") {
		t.Errorf("-o wide has no LOCKED UNTIL:\n%s", buf.String())
	}
}
