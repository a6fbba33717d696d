//go:build mpi

package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote/mpi"
	"github.com/goffload/offload/role"
)

// Suite mpi: the job's device ranks as MPI devices (run under a launcher,
// built with -tags mpi: go build -tags mpi -o bench ./bench &&
// mpirun -np 3 ./bench -suite mpi), each figure against a raw MPI baseline
// between the same ranks in the same job: blocking MPI_Send and MPI_Recv
// on both sides, with nothing of goffload in between (mpi.Raw). Then
// (unless -taskbench-mpi=false) Task Bench's METG with the device ranks as
// kind mpiN against goroutines on the host rank, as suite taskbench
// measures the other kinds (taskbench.go; plots taskbench_mpi_PATTERN.png).
func init() {
	for _, p := range strings.Split(tbPatternList, ",") {
		plotSpecs = append(plotSpecs, tbPlotSpec("mpi", p))
	}
	register("mpi", Suite{Devices: "mpi", Run: runMPI, Skip: func() string {
		if !role.UnderMPI() {
			return "not started by an MPI launcher: mpirun -np 3 ./bench -suite mpi"
		}
		return ""
	}})
}

func runMPI(env *Env) error {
	if offload.NumDevices() < 1 {
		return fmt.Errorf("the mpi suite needs device ranks (mpirun -np 3), has none")
	}
	if err := describeDevicesOf(env, min(2, offload.NumDevices()), "an MPI device", "mpi"); err != nil {
		return err
	}
	raw := func(size int, stream bool) func(n int) error {
		return func(n int) error { return mpi.Raw(0, n, size, stream) }
	}
	ping := raw(8, false)
	if err := ping(100); err != nil { // warm up
		return err
	}
	// host_compute_idle_device: the host's own Go code with the MPI
	// devices idle after a first launch (ping's warm-up was one).
	if err := offload.On(0).Run(benchEmpty); err != nil {
		return err
	}
	if err := hostComputeRow(env, "mpi.host_compute_idle_device"); err != nil {
		return err
	}
	env.Comment("baselines: raw.8B = an 8-byte MPI_Send/MPI_Recv ping-pong with device 0's rank; raw.64MiB = MPI_Send of 64 MiB to it and a 1-byte answer")
	dev := offload.On(0)
	// launch_rtt: a synchronous target region with an empty kernel.
	region := func(n int) error {
		for range n {
			if err := dev.Run(benchEmpty); err != nil {
				return err
			}
		}
		return nil
	}
	if err := region(100); err != nil {
		return err
	}
	t, b, err := env.Compare(region, ping)
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "mpi.launch_rtt", Goffload: t, Baseline: b, Note: "empty kernel, synchronous vs raw.8B"})

	// submit_64MiB: omp_target_memcpy of 64 MiB host→device.
	buf := fill(make([]byte, size64MiB))
	d, err := dev.Alloc(size64MiB)
	if err != nil {
		return err
	}
	defer offload.Free(d)
	submit := func(n int) error {
		for range n {
			if err := offload.Memcpy(d, offload.HostPtr(buf), size64MiB); err != nil {
				return err
			}
		}
		return nil
	}
	send := raw(size64MiB, true)
	if err := submit(1); err != nil {
		return err
	}
	if err := send(1); err != nil {
		return err
	}
	t, b, err = env.Compare(submit, send)
	if err != nil {
		return err
	}
	back := make([]byte, 4096)
	for _, off := range []int64{0, size64MiB - 4096} {
		if err := offload.Memcpy(offload.HostPtr(back), d.Offset(off), 4096); err != nil {
			return err
		}
		if !bytes.Equal(back, buf[off:off+4096]) {
			return fmt.Errorf("mpi.submit_64MiB: device memory at offset %d differs from what was copied there", off)
		}
	}
	env.Report(Result{Metric: "mpi.submit_64MiB", Goffload: t, Baseline: b,
		Note: fmt.Sprintf("host→device: %s vs %s", gbps(size64MiB, t), gbps(size64MiB, b))})

	if err := asyncChain(env, ping, "mpi.chain_per_op", func(int) int { return 0 }, "device 0 only, per task vs raw.8B"); err != nil {
		return err
	}
	if offload.NumDevices() < 2 {
		env.Comment("mpi.cross_device_per_op: needs two device ranks (mpirun -np 3)")
	} else if err := asyncChain(env, ping, "mpi.cross_device_per_op", func(i int) int { return i % 2 }, "devices 0,1 alternating, per task vs raw.8B"); err != nil {
		return err
	}
	if !tbInMPI {
		env.Comment("taskbench: left out (-taskbench-mpi=false)")
		return nil
	}
	// Task Bench's METG on the device ranks (kind mpiN, width N) against
	// goroutines in this rank (taskbench.go); the runtime cannot be
	// restarted in an MPI job (Stop finalizes MPI), so it runs here.
	pats, err := tbPatterns()
	if err != nil {
		return err
	}
	nd := offload.NumDevices()
	k, err := tbDeviceKind(env, "mpi", fmt.Sprintf("mpi%d", nd), 0, nd)
	if err != nil {
		return err
	}
	// And recorded (each point's graph recorded once and replayed), on
	// the same ranks, the kinds' runs alternating.
	kg, err := tbGraphKind(env, "mpi", fmt.Sprintf("mpi%d-graph", nd), 0, nd)
	if err != nil {
		return err
	}
	return measureTaskbench(env, "mpi", pats, []tbRunner{k, kg})
}
