package fleet

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/memcg"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/restore"
)

// What one cluster's restore costs the toolkit, the basis of
// DefaultRestoreParallel. A restore through etcd-operator selects and
// verifies the backup (a stream: download, decrypt, decompress, every
// hash), stages the snapshot uncompressed in a temporary file, then waits
// for etcd-operator's restore and verifies the cluster. Measured
// (docs/benchmarks.md#rebuild-from-the-store, a 1 GiB database: select 15.7
// s, stage 19.3 s, the operator 15.0 s, verify 3.2 s; #restore: the
// stream itself ran at about 500 MiB/s of one core), the toolkit's own CPU
// is busy a fraction of the time, less in production where COS, not the
// CPU, bounds one stream: a quarter of a CPU per restore
// (RestoreCPUMilliPerCluster). Memory does not grow with the database (the
// stream is bounded, the snapshot is on disk): the toolkit's restore peaks
// at 40–42 MiB (docs/kubernetes.md, TestShippedPods), decryption adds a
// flat 16 MiB (docs/benchmarks.md#encryption): RestoreBaseMemBytes for the
// process and RestoreMemBytesPerCluster for each restore, inside 75 % of
// the limit (the share the shipped pods' test allows).
const (
	RestoreCPUMilliPerCluster = 250
	RestoreBaseMemBytes       = 64 << 20
	RestoreMemBytesPerCluster = 32 << 20
	// RestoreMemShare is the share of the memory limit the restores may
	// use, in percent.
	RestoreMemShare = 75
	// MaxRestoreParallel bounds the default: beyond it the store and
	// etcd-operator, not the toolkit, are the limit, and a namespace's
	// clusters are better brought back in order than all at once.
	MaxRestoreParallel = 16
)

// DefaultRestoreFixedCost is a cluster's cost that doesn't depend on its
// size, for a plan that has no measured one: the steps of
// docs/benchmarks.md#rebuild-from-the-store outside the data (choose the
// backup, read the escrow, rebuild the objects, verify: about 4 s against
// the test's etcd-operator stand-in) plus the real etcd-operator's pods
// (its restore pod and the members, each scheduled and started: about 15 s
// more, an estimate, not measured here). A measurement replaces it.
const DefaultRestoreFixedCost = 20 * time.Second

// PodLimits are the toolkit pod's CPU (thousandths of a CPU) and memory
// (bytes) limits, from its cgroup; 0 is none.
func PodLimits() (cpuMilli, memBytes int64) { return memcg.SelfLimits() }

// DefaultRestoreParallel is restore-all's default --parallel for a pod
// with these limits (0: none):
//
//	by CPU:    cpuMilli / RestoreCPUMilliPerCluster (no CPU limit: runtime.NumCPU() × 1000 / it)
//	by memory: (memBytes × RestoreMemShare% − RestoreBaseMemBytes) / RestoreMemBytesPerCluster (no limit: no bound)
//
// the smaller of the two, clamped to [1, MaxRestoreParallel]. The toolkit
// pod (2 CPUs, 512 MiB) gets min(8, 10) = 8.
func DefaultRestoreParallel(cpuMilli, memBytes int64) int {
	if cpuMilli <= 0 {
		cpuMilli = int64(runtime.NumCPU()) * 1000
	}
	n := cpuMilli / RestoreCPUMilliPerCluster
	if memBytes > 0 {
		n = min(n, (memBytes*RestoreMemShare/100-RestoreBaseMemBytes)/RestoreMemBytesPerCluster)
	}
	return int(max(1, min(n, MaxRestoreParallel)))
}

// RestoreModel is the expected wall time of restoring clusters in
// parallel: each cluster takes Fixed plus its bytes over its share of the
// store's throughput, min(Stream, Total / Parallel), and the clusters are
// list-scheduled in the order given (each on the first of Parallel
// workers to free up).
type RestoreModel struct {
	// Stream is the store's throughput for one stream, bytes/s.
	Stream float64
	// Total is the store's throughput for all streams together, bytes/s
	// (the pod's network or the store's limit); 0: Stream × Parallel.
	Total float64
	// Fixed is one cluster's cost that doesn't depend on its size
	// (etcd-operator's restore, the pods' start, verify).
	Fixed time.Duration
	// Parallel is how many clusters are restored at once.
	Parallel int
}

// PerStream is one cluster's share of the store's throughput, bytes/s;
// 0 when the throughput is unknown.
func (m RestoreModel) PerStream() float64 {
	s := m.Stream
	if m.Total > 0 && m.Parallel > 0 {
		s = min(s, m.Total/float64(m.Parallel))
	}
	return max(s, 0)
}

// Each is one cluster's expected time: Fixed + bytes / PerStream (Fixed
// alone when the throughput is unknown).
func (m RestoreModel) Each(bytes int64) time.Duration {
	d := m.Fixed
	if s := m.PerStream(); s > 0 && bytes > 0 {
		d += time.Duration(float64(bytes) / s * float64(time.Second))
	}
	return d
}

// Expect is the expected wall time of restoring clusters of these sizes,
// in this order, Parallel at a time (at least one).
func (m RestoreModel) Expect(bytes []int64) time.Duration {
	p := max(m.Parallel, 1)
	free := make(durationHeap, 0, p)
	var end time.Duration
	for _, b := range bytes {
		var start time.Duration
		if len(free) == p {
			start = heap.Pop(&free).(time.Duration)
		}
		f := start + m.Each(b)
		end = max(end, f)
		heap.Push(&free, f)
	}
	return end
}

// Inputs are the model's inputs, for the plan's printout and its record
// (catalog.FleetRestorePlan.Model).
func (m RestoreModel) Inputs() map[string]string {
	rate := func(r float64) string {
		if r <= 0 {
			return "unknown"
		}
		return output.Bytes(int64(r)) + "/s"
	}
	total := rate(m.Total)
	if m.Total <= 0 {
		total = "stream × parallel"
	}
	return map[string]string{
		"storeStream":     rate(m.Stream),
		"storeTotal":      total,
		"perCluster":      rate(m.PerStream()),
		"fixedPerCluster": m.Fixed.String(),
		"parallel":        strconv.Itoa(max(m.Parallel, 1)),
	}
}

// String is the inputs on one line, sorted: "fixedPerCluster=30s
// parallel=8 perCluster=... storeStream=... storeTotal=...".
func (m RestoreModel) String() string {
	in := m.Inputs()
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + in[k]
	}
	return strings.Join(parts, " ")
}

type durationHeap []time.Duration

func (h durationHeap) Len() int           { return len(h) }
func (h durationHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h durationHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durationHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durationHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// MeasureStoreThroughput reads up to limit bytes of key (a range read
// where the store has one, else the start of a Get) and reports the
// rate, bytes/s, from the request to the last byte (the request's latency
// included: the rate is a little low for a small limit). ctx bounds it:
// a read cut short by ctx is an error, not a rate.
func MeasureStoreThroughput(ctx context.Context, st store.Store, key string, limit int64) (float64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("measure the store's throughput on %s: limit %d, want > 0", key, limit)
	}
	t0 := time.Now()
	var body io.ReadCloser
	var err error
	if r, ok := st.(store.Ranger); ok {
		body, err = r.GetRange(ctx, key, 0, limit)
	} else {
		body, err = st.Get(ctx, key)
	}
	if err != nil {
		return 0, fmt.Errorf("measure the store's throughput on %s: %w", key, err)
	}
	defer body.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(body, limit))
	d := time.Since(t0)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("measure the store's throughput on %s (after %s in %v): %w", key, output.Bytes(n), d.Round(time.Millisecond), err)
	}
	if n == 0 {
		return 0, fmt.Errorf("measure the store's throughput on %s: %w", key, errEmptyObject)
	}
	return float64(n) / max(d.Seconds(), 1e-9), nil
}

var errEmptyObject = errors.New("the object is empty: nothing to time")

// ScratchParallel is parallel lowered to what a scratch space of limit
// bytes holds of staged snapshots of largestStaged bytes each (at least
// one); parallel as it is when either is unknown (0). Restores running at
// once reserve their scratch space (restore's space check), so more would
// only wait; this keeps the plan's parallelism, and its expected time,
// honest.
func ScratchParallel(parallel int, limit, largestStaged int64) int {
	if limit <= 0 || largestStaged <= 0 {
		return parallel
	}
	return int(max(1, min(int64(parallel), limit/largestStaged)))
}

// capParallel lowers a default Parallel (ScratchCap) to ScratchParallel of
// the scratch limit (restore.EnvScratchLimit, when set and readable) and
// the largest database to stage.
func (r *restoreAll) capParallel() {
	if !r.opts.ScratchCap {
		return
	}
	v := strings.TrimSpace(os.Getenv(restore.EnvScratchLimit))
	if v == "" {
		return
	}
	limit, err := restore.ParseScratchLimit(v)
	if err != nil {
		return // each restore's space check refuses it, naming it
	}
	var largest int64
	for _, c := range r.todo {
		if c.action != "" && c.rawBytes > 0 {
			largest = max(largest, restore.StagedBytes(c.rawBytes+32))
		}
	}
	if n := ScratchParallel(r.opts.Parallel, limit, largest); n < r.opts.Parallel {
		r.log.Info("restore-all: the default parallelism lowered to what the scratch space holds of the largest database to stage",
			"parallel", n, "default", r.opts.Parallel, "scratch_limit", limit, "largest_staged", largest)
		r.opts.Parallel, r.rep.Parallel = n, n
	}
}
