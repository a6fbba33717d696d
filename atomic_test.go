package offload_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"weak"

	"github.com/goffload/offload"
)

// TestOneCopyPerNewEntry maps one buffer from 32 goroutines at once: the
// mapping is created and copied in exactly once, and every kernel that runs
// on it sees the whole copy (libomptarget needed "atomic maps" for this).
func TestOneCopyPerNewEntry(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host"), offload.WithInfo("copies,mapping", &info))
	for round := 0; round < 20; round++ {
		x := filled(1<<16, int32(round))
		var wg sync.WaitGroup
		ready := make(chan struct{})
		errs := make(chan error, 32)
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-ready
				out := make([]int32, len(x))
				if err := offload.EnterData(offload.To(x).Named("x")); err != nil {
					errs <- err
					return
				}
				if err := offload.Run(Copy, offload.From(out), x); err != nil {
					errs <- err
					return
				}
				if !allEqual(out, int32(round)) {
					t.Errorf("round %d: a kernel saw a partial copy", round)
				}
				errs <- offload.ExitData(offload.Release(x))
			}()
		}
		close(ready)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if e := offload.Entries(0); len(e) != 0 {
			t.Fatalf("round %d: entries left: %+v", round, e)
		}
	}
	var creates, copies, removes int
	for _, line := range strings.Split(info.String(), "\n") {
		if !strings.HasSuffix(line, "Name=x") {
			continue
		}
		switch {
		case strings.Contains(line, "Creating new map entry"):
			creates++
		case strings.Contains(line, "Copying data from host to device"):
			copies++
		case strings.Contains(line, "Removing map entry"):
			removes++
		}
	}
	// Each round creates x at least once; it may be removed and created again
	// when all 32 goroutines happen to be done with it in between, but every
	// creation copies once and only once.
	if creates < 20 || copies != creates || removes != creates {
		t.Errorf("%d creations, %d copies in, %d removals: want one copy and one removal per creation", creates, copies, removes)
	}
}

// TestMappedBufferStaysAlive checks that a mapped slice is kept alive by its
// mapping even when the program drops every reference to it.
func TestMappedBufferStaysAlive(t *testing.T) {
	start(t, offload.WithDevices("host"))
	arr := new([1 << 20]int32)
	wp := weak.Make(arr)
	if err := offload.EnterData(offload.To(arr[:])); err != nil {
		t.Fatal(err)
	}
	arr = nil
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	back := wp.Value()
	if back == nil {
		t.Fatal("a mapped buffer was collected")
	}
	if err := offload.ExitData(offload.Delete(back[:])); err != nil {
		t.Fatal(err)
	}
	back = nil
	for i := 0; i < 5 && wp.Value() != nil; i++ {
		runtime.GC()
	}
	if wp.Value() != nil {
		t.Error("an unmapped buffer is still kept alive")
	}
}
