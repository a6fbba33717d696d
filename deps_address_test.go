package offload_test

import (
	"context"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// TestDependSectionAtSharedAddress: a task is ordered by the section it
// names, not by a larger one another task named from the same first
// address. A halo row's copy (in: row 0 of a grid, device 0 to device 1)
// runs while the neighbour's write of rows 1 and 2 is held, although a
// read of rows 0..2 (begun at row 0, as a band's read of its halo row and
// its own rows is) is still going on: before, the copy waited for the
// write, which jacobi.SolveAny's halo copies did for the other device's
// band, serialising the two devices.
func TestDependSectionAtSharedAddress(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testKind) {
		k.start(t, 2)
		const n = 8
		g := make([]float64, 3*n)
		for i := range g {
			g[i] = float64(i)
		}
		d0, d1 := offload.On(0), offload.On(1)
		if err := d0.EnterData(offload.To(g)); err != nil {
			t.Fatal(err)
		}
		if err := d1.EnterData(offload.Alloc(g)); err != nil {
			t.Fatal(err)
		}
		src, err := d0.MappedPtr(g)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := d1.MappedPtr(g)
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		var once bool
		release := func() {
			if !once {
				once = true
				close(gate)
			}
		}
		defer release()
		// A band's read of its halo row and its own rows, held; then the
		// neighbour's write of those rows, which waits for it.
		read := offload.Nowait(offload.DependIn(g)).Go("read rows 0..2", func() error {
			<-gate
			return nil
		})
		write := offload.Nowait(offload.DependInOut(g[n:])).Go("write rows 1..2", func() error { return nil })
		// The halo row's copy reads row 0 only.
		halo := d0.Nowait(offload.DependIn(g[:n])).Memcpy(dst, src, 8*n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = halo.WaitContext(ctx)
		cancel()
		select {
		case <-write.Done():
			t.Fatal("the write of rows 1..2 ran before the read of rows 0..2 was let go")
		default:
		}
		if err != nil {
			t.Fatalf("the copy of row 0 did not complete while the write of rows 1..2 waited (it waited for the write): %v", err)
		}
		release()
		for _, task := range []*offload.Task{read, write} {
			if err := task.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		if err := d1.ExitData(offload.From(g[:n])); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if g[i] != float64(i) {
				t.Fatalf("row 0 copied to device 1 and back: g[%d] = %v, want %d", i, g[i], i)
			}
		}
	})
}
