package cuda_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

// geoK is a kernel whose PTX entry the geometry test's fake GPU records.
var geoK = offload.MustKernel2("cudatest.geo", func(ctx offload.Ctx, x offload.InOut[int64], n int) {
	for i := range n {
		x[i]++
	}
}).PTX([]byte(testPTX), "addone")

// TestGeometryClauses: num_teams and thread_limit reach cuLaunchKernel as
// the grid and block, what they leave unset comes from the trip count,
// bad dimensions fail naming the clause or the kernel, and a CPU device
// takes them as a hint.
func TestGeometryClauses(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	var mu sync.Mutex
	var grids, blocks [][3]uint32
	drv.SetKernel("addone", func(l *cudafake.Launch) error {
		mu.Lock()
		grids, blocks = append(grids, l.Grid), append(blocks, l.Block)
		mu.Unlock()
		return nil
	})
	defer cuda.UseDriverForTests(drv)()
	var info bytes.Buffer
	if err := offload.Start(offload.WithDevices("cuda,host"), offload.WithOffload("MANDATORY"),
		offload.WithInfo("kernels", &info)); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	gpu, host := offload.On(0), offload.On(1)
	const n = 1000
	x := make([]int64, n)

	for _, c := range []struct {
		dev         offload.Device
		grid, block [3]uint32
		nowait      bool
	}{
		{gpu, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, false}, // the trip count: ceil(1000/256)
		{gpu.NumTeams(3).ThreadLimit(64), [3]uint32{3, 1, 1}, [3]uint32{64, 1, 1}, false},
		{gpu.ThreadLimit(128), [3]uint32{8, 1, 1}, [3]uint32{128, 1, 1}, false}, // ceil(1000/128)
		{gpu.NumTeams(2, 3), [3]uint32{2, 3, 1}, [3]uint32{256, 1, 1}, true},
		{gpu.ThreadLimit(8, 8, 4).NumTeams(5, 1, 7), [3]uint32{5, 1, 7}, [3]uint32{8, 8, 4}, true},
	} {
		mu.Lock()
		grids, blocks = nil, nil
		mu.Unlock()
		var err error
		if c.nowait {
			err = geoK.Nowait(c.dev.Nowait(), x, n).Wait()
		} else {
			err = geoK.Run(c.dev, x, n)
		}
		if err != nil {
			t.Fatalf("grid %v block %v: %v", c.grid, c.block, err)
		}
		mu.Lock()
		if len(grids) != 1 || grids[0] != c.grid || blocks[0] != c.block {
			t.Errorf("launches with grids %v blocks %v, want one with grid %v block %v", grids, blocks, c.grid, c.block)
		}
		mu.Unlock()
	}
	if !strings.Contains(info.String(), "Launching kernel cudatest.geo on device 0 (cuda) with num_teams(3) thread_limit(64)") {
		t.Errorf("the info output does not show the geometry:\n%s", info.String())
	}

	for _, c := range []struct {
		dev    offload.Device
		target error
		says   string
	}{
		{gpu.NumTeams(0), offload.ErrBadArgument, "target cudatest.geo: num_teams(0): invalid argument: dimension 0 is 0"},
		{gpu.NumTeams(1, 2, 3, 4), offload.ErrBadArgument, "num_teams(1,2,3,4): invalid argument: 4 dimensions"},
		{gpu.NumTeams(), offload.ErrBadArgument, "num_teams(): invalid argument: 0 dimensions"},
		{gpu.ThreadLimit(-1).NumTeams(2), offload.ErrBadArgument, "thread_limit(-1)"},
		{host.ThreadLimit(0), offload.ErrBadArgument, "thread_limit"}, // checked on every device
		{gpu.ThreadLimit(2048), plugin.ErrBadKernel, `kernel "cudatest.geo": num_teams(1) thread_limit(2048)`},
		{gpu.ThreadLimit(32, 32, 2), plugin.ErrBadKernel, "2048 threads per block"},
		{gpu.NumTeams(1, 70000), plugin.ErrBadKernel, `kernel "cudatest.geo"`},
	} {
		err := geoK.Run(c.dev, x, n)
		if !errors.Is(err, c.target) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("error %v, want one wrapping %q that says %q", err, c.target, c.says)
		}
		if err := geoK.Nowait(c.dev.Nowait(), x, n).Wait(); !errors.Is(err, c.target) {
			t.Errorf("nowait: error %v, want one wrapping %q", err, c.target)
		}
	}

	// A CPU device runs the kernel whole whatever the clauses say.
	clear(x)
	if err := geoK.Run(host.NumTeams(2).ThreadLimit(1), x, n); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		if v != 1 {
			t.Fatalf("host: x[%d] = %d, want 1", i, v)
		}
	}
	// And so does the initial device, which If(false) makes it.
	if err := geoK.Run(gpu.NumTeams(2).If(false), x, n); err != nil || x[n-1] != 2 {
		t.Fatalf("initial device: %v, x[%d] = %d", err, n-1, x[n-1])
	}
}

// geoAt takes the global offset after its Go parameters (addoneat's
// p_offset); geoLookup reads a grid longer than the work it writes.
var (
	geoAt = offload.MustKernel2("cudatest.geoat", func(ctx offload.Ctx, x offload.InOut[int64], n int) {
		for i := range n {
			x[i]++
		}
	}).PTX([]byte(testPTX), "addoneat")
	geoLookup = offload.MustKernel3("cudatest.geolookup", func(ctx offload.Ctx, grid offload.In[int64], out offload.Out[int64], n int) {
	}).PTX([]byte(testPTX), "lookup")
)

// TestGlobalSizeOffset: GlobalSize sets the threads a PTX launch runs
// (rounded up to whole blocks), GlobalOffset reaches an entry that takes
// it after its Go parameters and is refused by one that does not, and by
// default a launch runs one thread per element of the longest slice the
// kernel writes, not of a longer one it only reads (issue 47 item 9).
func TestGlobalSizeOffset(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	type launch struct {
		entry       string
		grid, block [3]uint32
		offset      uint64
	}
	var mu sync.Mutex
	var got []launch
	record := func(l *cudafake.Launch) error {
		mu.Lock()
		defer mu.Unlock()
		r := launch{entry: l.Entry, grid: l.Grid, block: l.Block}
		if l.Entry == "addoneat" {
			r.offset = binary.LittleEndian.Uint64(l.Params[2])
		}
		got = append(got, r)
		return nil
	}
	for _, e := range []string{"addone", "addoneat", "lookup"} {
		drv.SetKernel(e, record)
	}
	defer cuda.UseDriverForTests(drv)()
	if err := offload.Start(offload.WithDevices("cuda"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	gpu := offload.On(0)
	const n = 1000
	x := make([]int64, n)
	grid := make([]int64, 100*n)
	for _, c := range []struct {
		run  func() error
		want launch
	}{
		{func() error { return geoK.Run(gpu.GlobalSize(300), x, n) }, launch{"addone", [3]uint32{2, 1, 1}, [3]uint32{256, 1, 1}, 0}},
		{func() error { return geoK.Run(gpu.GlobalSize(300).ThreadLimit(100), x, n) }, launch{"addone", [3]uint32{3, 1, 1}, [3]uint32{100, 1, 1}, 0}},
		{func() error { return geoAt.Run(gpu.GlobalOffset(500).GlobalSize(500), x, n) }, launch{"addoneat", [3]uint32{2, 1, 1}, [3]uint32{256, 1, 1}, 500}},
		{func() error { return geoAt.Run(gpu, x, n) }, launch{"addoneat", [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0}},
		// 1000 elements written, 100000 read: ceil(1000/256) blocks.
		{func() error { return geoLookup.Run(gpu, grid, x, n) }, launch{"lookup", [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0}},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		if err := c.run(); err != nil {
			t.Fatalf("%+v: %v", c.want, err)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("launches %+v, want %+v", got, c.want)
		}
		mu.Unlock()
	}
	for _, c := range []struct {
		err    error
		target error
		says   string
	}{
		{geoK.Run(gpu.GlobalOffset(5), x, n), plugin.ErrBadKernel, `kernel "cudatest.geo": global_offset(5): its PTX entry addone takes no global offset: declare one long long after the Go parameters`},
		{geoAt.Run(gpu.GlobalOffset(5, 1), x, n), plugin.ErrBadKernel, "its PTX entry addoneat takes the x offset only"},
		{geoK.Run(gpu.GlobalOffset(-1), x, n), offload.ErrBadArgument, "global_offset(-1): invalid argument: dimension 0 is -1, want 0 to"},
		{geoK.Run(gpu.GlobalSize(0), x, n), offload.ErrBadArgument, "global_size(0): invalid argument"},
		{geoK.Run(gpu.GlobalSize(8).NumTeams(2), x, n), offload.ErrBadArgument, "num_teams and global_size both give the number of work-items"},
	} {
		if !errors.Is(c.err, c.target) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("error %v, want one wrapping %q that says %q", c.err, c.target, c.says)
		}
	}
}
