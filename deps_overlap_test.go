package offload_test

import (
	"fmt"
	"testing"

	"github.com/goffload/offload"
)

// overlapGate holds deps.gatedfill until the test lets it go.
var overlapGate chan struct{}

var gatedFill = offload.MustKernel2("deps.gatedfill", func(ctx offload.Ctx, v float64, x offload.InOut[float64]) {
	<-overlapGate
	for i := range x {
		x[i] = v
	}
})

// Tasks on overlapping sections that start at different addresses are
// ordered (beyond OpenMP, which leaves them unspecified): the reader of
// x[5:15] waits for the writer of x[0:10], on a device and across devices;
// a reader of a disjoint section does not wait.
func TestDependOverlappingSections(t *testing.T) {
	forEachKind(t, testDependOverlappingSections)
}

func testDependOverlappingSections(t *testing.T, k testKind) {
	k.needInProcess(t)
	k.start(t, 2)
	x := make([]float64, 20)
	overlapGate = make(chan struct{})
	w := gatedFill.Nowait(offload.On(0).Nowait(offload.DependOut(x[0:10])), 1, x[0:10])
	// A disjoint section runs while the writer is held.
	disjoint := gatedFill.With(offload.ToFrom(x[10:20])).Nowait(offload.On(1).Nowait(offload.DependOut(x[10:20])), 2, x[10:20])
	var seen []float64
	r := offload.Nowait(offload.DependIn(x[5:15])).Go("read", func() error {
		seen = append([]float64(nil), x[5:15]...)
		return nil
	})
	// Let the writers go only now: a reader that did not wait has read
	// zeros by the time the first writer could write.
	select {
	case <-r.Done():
		t.Fatalf("the reader of x[5:15] ran before the writer of x[0:10] (saw %v)", seen)
	default:
	}
	close(overlapGate)
	for _, task := range []*offload.Task{w, disjoint, r} {
		if err := task.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(seen) != "[1 1 1 1 1 2 2 2 2 2]" {
		t.Errorf("reader saw %v, want five 1s (x[0:10]'s writer) and five 2s (x[10:20]'s)", seen)
	}
}
