package testfix

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The child half: allocate and touch $TESTFIX_ALLOC_MIB, then linger.
func init() {
	if s := os.Getenv("TESTFIX_ALLOC_MIB"); s != "" {
		n, _ := strconv.Atoi(s)
		b := make([]byte, n<<20)
		for i := range b {
			if i%4096 == 0 {
				b[i] = 1
			}
		}
		time.Sleep(100 * time.Millisecond)
		os.Exit(int(b[len(b)-4096] - 1))
	}
}

var ballast []byte

// RunMeasured reports the child's own peak, where ru_maxrss also counts
// the parent's memory at the time of the fork.
func TestRunMeasuredIsTheChildsOwnPeak(t *testing.T) {
	ballast = make([]byte, 256<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	run := func(mib int) (int64, int64) {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), "TESTFIX_ALLOC_MIB="+strconv.Itoa(mib))
		_, hwm, err := RunMeasured(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return hwm, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	}
	small, smallMaxrss := run(16)
	big, _ := run(160)
	t.Logf("16 MiB child: VmHWM %d MiB, ru_maxrss %d MiB; 160 MiB child: VmHWM %d MiB", small>>20, smallMaxrss>>20, big>>20)
	if small < 16<<20 || small > 96<<20 {
		t.Errorf("16 MiB child measured at %d MiB", small>>20)
	}
	if big < 160<<20 || big > 240<<20 {
		t.Errorf("160 MiB child measured at %d MiB", big>>20)
	}
	if smallMaxrss < 256<<20 {
		t.Logf("ru_maxrss did not include the parent's 256 MiB here (%d MiB): kernel behaviour differs", smallMaxrss>>20)
	}
	ballast = nil
}
