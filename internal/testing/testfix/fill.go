package testfix

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// FillLarge writes about total bytes of large values (96 KiB of base64
// random bytes each, compressible like opaque blobs), in transactions of
// ten, four at a time.
func FillLarge(tb testing.TB, cli *clientv3.Client, total int64) {
	tb.Helper()
	const valueSize, perTxn, workers = 96 << 10, 10, 4
	n := int(total/valueSize) + 1
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range workers {
		wg.Go(func() {
			raw := make([]byte, valueSize*3/4)
			for start := range work {
				var ops []clientv3.Op
				for i := start; i < min(start+perTxn, n); i++ {
					crand.Read(raw)
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/blobs/%08d", i), base64.StdEncoding.EncodeToString(raw)))
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := cli.Txn(ctx).Then(ops...).Commit()
				cancel()
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for start := 0; start < n; start += perTxn {
		work <- start
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		tb.Fatalf("fill: %v", firstErr)
	}
}

// RunBench runs the command name with env, as a benchmark runs the tool,
// and returns its wall time and peak RSS (RunMeasured); it fails tb with
// the command's output when it fails.
func RunBench(tb testing.TB, env []string, name string, args ...string) (time.Duration, int64) {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	d, rss, err := RunMeasured(cmd)
	if err != nil {
		tb.Fatalf("%s: %v\n%s", filepath.Base(name), err, out.String())
	}
	return d, rss
}
