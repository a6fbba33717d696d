package cuda_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

// TestPeerAccess: copies between GPUs enable peer access once per pair
// and direction, where the GPUs can, and are direct copies from then on;
// a GPU without a peer link still copies, through host memory. Every
// value arrives, with copies from several goroutines at once.
func TestPeerAccess(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100, cudafake.H100, cudafake.H100}, Isolated: []int{2}})
	devs, err := cuda.OpenWith(drv, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 12
	bufs := make([]plugin.Ptr, len(devs))
	for i, d := range devs {
		if bufs[i], err = d.Alloc(4 * n); err != nil {
			t.Fatal(err)
		}
	}
	// Copy between every ordered pair, from four goroutines per pair, each
	// its own quarter of the buffer.
	type pair struct{ from, to int }
	var pairs []pair
	for i := range devs {
		for j := range devs {
			if i != j {
				pairs = append(pairs, pair{i, j})
			}
		}
	}
	for _, p := range pairs {
		src := make([]byte, 4*n)
		for i := range src {
			src[i] = byte(i*7 + p.from*31 + p.to)
		}
		from, to := devs[p.from], devs[p.to]
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q, err := from.NewQueue()
				if err != nil {
					errs <- err
					return
				}
				defer q.Close()
				off := plugin.Ptr(g * n)
				if err := q.Submit(bufs[p.from]+off, src[g*n:(g+1)*n]); err != nil {
					errs <- err
					return
				}
				if err := q.(plugin.Exchanger).Exchange(to, bufs[p.to]+off, bufs[p.from]+off, n); err != nil {
					errs <- err
					return
				}
				errs <- q.Synchronize()
			}()
		}
		wg.Wait()
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("GPU %d to GPU %d: %v", p.from, p.to, err)
			}
		}
		back := make([]byte, 4*n)
		q, _ := to.NewQueue()
		q.Retrieve(back, bufs[p.to])
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		q.Close()
		if !bytes.Equal(back, src) {
			t.Errorf("GPU %d to GPU %d: the copy came back different", p.from, p.to)
		}
	}
	// 0→1 and 1→0 can be direct; every pair with GPU 2 cannot.
	if got := drv.Calls("cuCtxEnablePeerAccess"); got != 2 {
		t.Errorf("cuCtxEnablePeerAccess called %d times, want 2 (once per direction between GPUs 0 and 1)", got)
	}
	staged, direct := drv.PeerCopies()
	if want := 4 * 2; direct != want {
		t.Errorf("%d direct peer copies, want %d", direct, want)
	}
	if want := 4 * 4; staged != want {
		t.Errorf("%d peer copies through host memory, want %d (those with the isolated GPU)", staged, want)
	}
	for i, d := range devs {
		if err := d.Close(); err != nil {
			t.Fatal(fmt.Errorf("device %d: %w", i, err))
		}
	}
}
