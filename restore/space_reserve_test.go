package restore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestReserveSpaceParallel: four restores staging at once under a scratch
// limit of 2.5 staged copies (as restore-all's --parallel in the toolkit
// pod): at no moment is more reserved, or written, than the limit; all
// four finish, some after waiting for the others; one that could never
// fit fails at once with the SpaceError. Real files on the real file
// system, the limit given as EnvScratchLimit gives it.
func TestReserveSpaceParallel(t *testing.T) {
	root := t.TempDir()
	const raw = 4 << 20
	need := StagedBytes(raw)
	limits := []limitedRoot{{root: root, limit: need*5/2 + diskUsage(root), env: EnvScratchLimit}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu                sync.Mutex
		maxReserved, maxU int64
		waited, done      int
	)
	sample := func() {
		reserved.mu.Lock()
		r := reservedBy()[root]
		reserved.mu.Unlock()
		u := diskUsage(root)
		mu.Lock()
		maxReserved, maxU = max(maxReserved, r), max(maxU, u)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			dir, err := os.MkdirTemp(root, "restore-")
			if err != nil {
				t.Error(err)
				return
			}
			t0 := time.Now()
			if _, err := reserveIn(ctx, limits, dir, []SpaceNeed{{Path: dir, Bytes: need, What: "staged", Hint: HintScratch}}); err != nil {
				t.Errorf("restore %d: %v", i, err)
				os.RemoveAll(dir)
				return
			}
			w := time.Since(t0)
			sample()
			if err := os.WriteFile(filepath.Join(dir, "snapshot.db"), make([]byte, raw), 0o600); err != nil {
				t.Error(err)
			}
			sample()
			time.Sleep(600 * time.Millisecond)
			sample()
			os.RemoveAll(dir)
			mu.Lock()
			done++
			if w >= reservePoll {
				waited++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if done != 4 {
		t.Fatalf("%d of 4 restores finished", done)
	}
	if maxReserved > limits[0].limit || maxU > limits[0].limit {
		t.Errorf("reserved at most %d, used at most %d: over the limit %d", maxReserved, maxU, limits[0].limit)
	}
	if waited == 0 {
		t.Errorf("no restore waited: all four (%d bytes each) were let in under a limit of %d", need, limits[0].limit)
	}
	t.Logf("4 restores of %d bytes under %d: at most %d reserved, %d used; %d waited", need, limits[0].limit, maxReserved, maxU, waited)

	// One that could never fit, beside another's reservation: at once.
	dir := t.TempDir()
	release, err := reserveIn(ctx, limits, dir, []SpaceNeed{{Path: root, Bytes: need, What: "staged", Hint: HintScratch}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	t0 := time.Now()
	_, err = reserveIn(ctx, limits, filepath.Join(root, "x"), []SpaceNeed{{Path: root, Bytes: limits[0].limit + 1, What: "too big", Hint: HintScratch}})
	var se *SpaceError
	if !errors.As(err, &se) || time.Since(t0) > reservePoll {
		t.Errorf("a need over the limit: %v after %v, want a SpaceError at once", err, time.Since(t0))
	}
}
