package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestDefaultRestoreParallel(t *testing.T) {
	t.Parallel()
	const mi = 1 << 20
	for _, c := range []struct {
		name     string
		cpuMilli int64
		mem      int64
		want     int
	}{
		{"the toolkit pod: 2 CPUs, 512 MiB (CPU-bound: 8, memory would allow 10)", 2000, 512 * mi, 8},
		{"the CronJob pod's size: 1 CPU, 512 MiB", 1000, 512 * mi, 4},
		{"memory-bound: 4 CPUs, 256 MiB", 4000, 256 * mi, 4},
		{"a tiny pod still restores one at a time", 100, 64 * mi, 1},
		{"a quarter CPU is one", 250, 1 << 30, 1},
		{"big pods are clamped", 16000, 64 << 30, fleet.MaxRestoreParallel},
		{"no memory limit: CPU alone", 3000, 0, 12},
		{"memory under the base: one", 2000, 32 * mi, 1},
	} {
		if got := fleet.DefaultRestoreParallel(c.cpuMilli, c.mem); got != c.want {
			t.Errorf("%s: DefaultRestoreParallel(%d, %d) = %d, want %d", c.name, c.cpuMilli, c.mem, got, c.want)
		}
	}
	// No limits at all: the machine's CPUs.
	want := min(max(runtime.NumCPU()*1000/fleet.RestoreCPUMilliPerCluster, 1), fleet.MaxRestoreParallel)
	if got := fleet.DefaultRestoreParallel(0, 0); got != want {
		t.Errorf("no limits: %d, want %d (%d CPUs)", got, want, runtime.NumCPU())
	}
	// The pod's own limits give an answer in range.
	cpu, mem := fleet.PodLimits()
	if n := fleet.DefaultRestoreParallel(cpu, mem); n < 1 || n > fleet.MaxRestoreParallel {
		t.Errorf("this pod (cpu %d, memory %d): %d", cpu, mem, n)
	}
}

func TestRestoreModelExpect(t *testing.T) {
	t.Parallel()
	const mb = 1_000_000
	s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	for _, c := range []struct {
		name  string
		m     fleet.RestoreModel
		bytes []int64
		want  time.Duration
		each  time.Duration // m.Each(bytes[0])
	}{
		{
			name:  "nothing to restore",
			m:     fleet.RestoreModel{Stream: mb, Fixed: 10 * time.Second, Parallel: 4},
			bytes: nil, want: 0,
		},
		{
			name:  "one at a time: the sum",
			m:     fleet.RestoreModel{Stream: 10 * mb, Fixed: 10 * time.Second, Parallel: 1},
			bytes: []int64{100 * mb, 50 * mb, 0}, want: s(10 + 10 + 10 + 5 + 10), each: s(20),
		},
		{
			name: "two workers, list scheduled in the order given",
			// worker A: 100 MB (20 s), then 10 MB at 20 s (11 s): 31 s;
			// worker B: 50 MB (15 s), then 50 MB at 15 s (15 s): 30 s.
			m:     fleet.RestoreModel{Stream: 10 * mb, Fixed: 10 * time.Second, Parallel: 2},
			bytes: []int64{100 * mb, 50 * mb, 50 * mb, 10 * mb}, want: s(31), each: s(20),
		},
		{
			name: "the order matters: largest last is slower",
			// A: 10 (11 s), then 50 at 11 (26 s); B: 50 (15 s), then 100 at 15 (35 s).
			m:     fleet.RestoreModel{Stream: 10 * mb, Fixed: 10 * time.Second, Parallel: 2},
			bytes: []int64{10 * mb, 50 * mb, 50 * mb, 100 * mb}, want: s(35), each: s(11),
		},
		{
			name: "the store's total bandwidth shared: each stream gets total/parallel",
			// 4 streams share 20 MB/s: 5 MB/s each, 100 MB in 20 s + 1 s.
			m:     fleet.RestoreModel{Stream: 10 * mb, Total: 20 * mb, Fixed: time.Second, Parallel: 4},
			bytes: []int64{100 * mb, 100 * mb, 100 * mb, 100 * mb}, want: s(21), each: s(21),
		},
		{
			name:  "total above stream × parallel: the stream bounds",
			m:     fleet.RestoreModel{Stream: 10 * mb, Total: 1000 * mb, Fixed: time.Second, Parallel: 2},
			bytes: []int64{100 * mb, 100 * mb, 100 * mb}, want: s(22), each: s(11),
		},
		{
			name:  "unknown throughput: the fixed cost alone",
			m:     fleet.RestoreModel{Fixed: 30 * time.Second, Parallel: 2},
			bytes: []int64{1 << 30, 1 << 30, 1 << 30}, want: s(60), each: s(30),
		},
		{
			name:  "parallel 0 is one",
			m:     fleet.RestoreModel{Stream: mb, Fixed: time.Second},
			bytes: []int64{mb, mb}, want: s(4), each: s(2),
		},
		{
			name: "100 clusters of 100 MB at 8, 50 MB/s a stream, 400 MB/s in all, 30 s fixed",
			// 13 rounds (100 = 12×8 + 4) of 30 + 100/50 = 32 s.
			m:     fleet.RestoreModel{Stream: 50 * mb, Total: 400 * mb, Fixed: 30 * time.Second, Parallel: 8},
			bytes: repeat(100*mb, 100), want: s(13 * 32), each: s(32),
		},
	} {
		if got := c.m.Expect(c.bytes); got != c.want {
			t.Errorf("%s: Expect = %v, want %v", c.name, got, c.want)
		}
		if len(c.bytes) > 0 {
			if got := c.m.Each(c.bytes[0]); got != c.each {
				t.Errorf("%s: Each = %v, want %v", c.name, got, c.each)
			}
		}
	}
}

func repeat(n int64, times int) []int64 {
	out := make([]int64, times)
	for i := range out {
		out[i] = n
	}
	return out
}

func TestRestoreModelInputs(t *testing.T) {
	t.Parallel()
	m := fleet.RestoreModel{Stream: 50 << 20, Total: 200 << 20, Fixed: 30 * time.Second, Parallel: 8}
	in := m.Inputs()
	want := map[string]string{
		"storeStream": "50.0 MiB/s", "storeTotal": "200.0 MiB/s", "perCluster": "25.0 MiB/s",
		"fixedPerCluster": "30s", "parallel": "8",
	}
	for k, v := range want {
		if in[k] != v {
			t.Errorf("Inputs[%s] = %q, want %q", k, in[k], v)
		}
	}
	if len(in) != len(want) {
		t.Errorf("Inputs = %v, want %v", in, want)
	}
	if got, w := m.String(), "fixedPerCluster=30s parallel=8 perCluster=25.0 MiB/s storeStream=50.0 MiB/s storeTotal=200.0 MiB/s"; got != w {
		t.Errorf("String = %q, want %q", got, w)
	}
	unknown := fleet.RestoreModel{Fixed: time.Second}.Inputs()
	if unknown["storeStream"] != "unknown" || unknown["perCluster"] != "unknown" || unknown["parallel"] != "1" {
		t.Errorf("an unmeasured model's inputs: %v", unknown)
	}
}

// storeOnly hides every optional ability of a store (Ranger included).
type storeOnly struct{ store.Store }

// TestMeasureStoreThroughput times reads of a real MinIO object: a range
// read of the limit only (not the whole object), the same through a store
// without Ranger, a slowed store measured slower, a stalled read cut by
// its context, and a missing key.
func TestMeasureStoreThroughput(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	key := testenv.Prefix(t) + "/obj"
	if _, err := st.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte("x"), 8<<20))); err != nil {
		t.Fatal(err)
	}

	fs := faults.Wrap(st)
	fast, err := fleet.MeasureStoreThroughput(ctx, fs, key, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n := fs.CountCalls(faults.OpGetRange, key); n != 1 {
		t.Errorf("range reads: %d, want 1 (the store has Ranger)", n)
	}
	if fast < 1<<20 {
		t.Errorf("4 MiB from MinIO on loopback at %.0f B/s", fast)
	}
	if _, err := fleet.MeasureStoreThroughput(ctx, storeOnly{st}, key, 1<<20); err != nil {
		t.Errorf("without Ranger: %v", err)
	}

	// Slowed: 50 ms before each body read (of at most 32 KiB: io.Copy's
	// buffer) is at most 0.66 MB/s.
	fs.Inject(faults.Fault{Op: faults.OpGetRange, Key: key, Kind: faults.Slow, Delay: 50 * time.Millisecond})
	slow, err := fleet.MeasureStoreThroughput(ctx, fs, key, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if slow > 1.5e6 || slow*2 > fast {
		t.Errorf("slowed store measured %.0f B/s (unslowed %.0f B/s)", slow, fast)
	}
	t.Logf("unslowed %.0f B/s, slowed %.0f B/s", fast, slow)
	fs.Clear()

	// Stalled: the context bounds it.
	fs.Inject(faults.Fault{Op: faults.OpGetRange, Key: key, Kind: faults.Stall})
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = fleet.MeasureStoreThroughput(sctx, fs, key, 1<<20)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), key) {
		t.Errorf("stalled read: %v, want a deadline error naming %s", err, key)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("stalled read returned after %v", d)
	}
	fs.Clear()

	if _, err := fleet.MeasureStoreThroughput(ctx, st, key+"-missing", 1<<20); !store.IsNotFound(err) {
		t.Errorf("missing key: %v, want not found", err)
	}
	if _, err := fleet.MeasureStoreThroughput(ctx, st, key, 0); err == nil {
		t.Error("limit 0 measured something")
	}
}

// TestScratchParallel: the default parallelism is lowered to what the
// scratch limit holds of the largest staged database (the toolkit pod:
// 10Gi and 1.5 GiB databases hold 6, not 8), never below one, and left as
// it is when either is unknown.
func TestScratchParallel(t *testing.T) {
	const gi = int64(1) << 30
	for _, c := range []struct {
		parallel       int
		limit, largest int64
		want           int
	}{
		{8, 10 * gi, 3 * gi / 2, 6},
		{8, 10 * gi, gi, 8},
		{8, 10 * gi, 20 * gi, 1},
		{8, 0, gi, 8},
		{8, 10 * gi, 0, 8},
		{2, 10 * gi, gi, 2},
	} {
		if got := fleet.ScratchParallel(c.parallel, c.limit, c.largest); got != c.want {
			t.Errorf("ScratchParallel(%d, %d, %d) = %d, want %d", c.parallel, c.limit, c.largest, got, c.want)
		}
	}
}
