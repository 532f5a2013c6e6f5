// Command journalbench is the benchmarks' many-clusters journal process:
// one process running journal.Capture (the code path of `etcd-recovery
// journal`) for every cluster of a config file concurrently, so that a
// benchmark measures that one process's CPU and peak RSS
// (BenchmarkJournalRPO's 50 clusters; the journal command journals one
// cluster a process).
//
//	journalbench CONFIG.json
//
// CONFIG (mode 0600: it holds the store's credentials, never argv) names
// the store, the layout's prefix, the segment interval and the clusters
// (id, client endpoints, base backup name and revision). Each stored
// segment is one JSON line on stdout: {"cluster","first","last","bytes",
// "unixNano"}, written when Capture reports it stored (OnSegment). A line
// "ready" on stdout says every capture is listing or watching. SIGTERM or
// SIGINT ends the captures (each writes what it holds) and exits 0; a
// capture's error exits 1 naming the cluster.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store/cos"
)

// Config is journalbench's input.
type Config struct {
	Endpoint, Region, Bucket, CAFile string
	AccessKey, SecretKey             string
	Prefix                           string
	SegmentInterval                  time.Duration
	// Budget is the captures' shared memory budget in bytes
	// (journal.Budget; 0: none), as journal's --memory-budget.
	Budget   int64
	Clusters []Cluster
}

// Cluster is one captured cluster.
type Cluster struct {
	ID         string
	Endpoints  []string
	BaseBackup string
	BaseRev    int64
}

// Stored is one stdout line.
type Stored struct {
	Cluster  string `json:"cluster"`
	First    int64  `json:"first"`
	Last     int64  `json:"last"`
	Bytes    int64  `json:"bytes"`
	UnixNano int64  `json:"unixNano"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "journalbench:", err)
		os.Exit(1)
	}
}

// memoryLimit is the Go soft memory limit, as the etcd-recovery command
// sets it (cmd/etcd-recovery/main.go) unless GOMEMLIMIT is set.
const memoryLimit = 48 << 20

func run() error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	if path := os.Getenv("JOURNALBENCH_HEAP"); path != "" {
		// The heap profile at the in-use peak (for a benchmark's
		// investigation).
		go func() {
			var peak uint64
			for {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak+peak/10 {
					peak = ms.HeapInuse
					if f, err := os.Create(path); err == nil {
						pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: journalbench CONFIG.json")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		return err
	}
	var cfg Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("config %s: %w", os.Args[1], err)
	}
	st, err := cos.New(cos.Config{Endpoint: cfg.Endpoint, Region: cfg.Region, Bucket: cfg.Bucket, CAFile: cfg.CAFile,
		Creds: cos.Credentials{AccessKeyID: cfg.AccessKey, SecretAccessKey: cfg.SecretKey, Source: "config file"}})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var (
		outMu sync.Mutex
		enc   = json.NewEncoder(os.Stdout)
		wg    sync.WaitGroup
		errs  = make(chan error, len(cfg.Clusters))
	)
	budget := journal.NewBudget(cfg.Budget)
	if os.Getenv("JOURNALBENCH_DEBUG") != "" && budget != nil {
		go func() {
			for range time.Tick(time.Second) {
				u, p := budget.Used()
				fmt.Fprintf(os.Stderr, "budget used %d MiB peak %d MiB waiting %d\n", u>>20, p>>20, budget.Waiting())
			}
		}()
	}
	for _, c := range cfg.Clusters {
		// The journal command's connection (etcdconn: 1 MiB flow-control
		// windows, the 64 MiB receive limit).
		cli, err := etcdconn.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second}.Client(context.Background())
		if err != nil {
			return fmt.Errorf("cluster %s: connecting: %w", c.ID, err)
		}
		defer cli.Close()
		wg.Go(func() {
			err := journal.Capture(ctx, journal.CaptureOptions{
				Client: cli, ClusterID: c.ID, BaseBackup: c.BaseBackup, BaseRev: c.BaseRev,
				Store: st, Layout: catalog.Layout{Prefix: cfg.Prefix}, Encoding: objectio.Encoding{Compression: objectio.CompressZstd},
				SegmentInterval: cfg.SegmentInterval, Log: log, Budget: budget,
				OnSegment: func(s journal.SegmentInfo) {
					now := time.Now().UnixNano()
					outMu.Lock()
					defer outMu.Unlock()
					enc.Encode(Stored{Cluster: c.ID, First: s.FirstRev, Last: s.LastRev, Bytes: s.Size, UnixNano: now})
				},
			})
			if err != nil {
				errs <- fmt.Errorf("cluster %s: %w", c.ID, err)
			}
		})
	}
	outMu.Lock()
	fmt.Println("ready")
	outMu.Unlock()
	wg.Wait()
	close(errs)
	return <-errs
}
