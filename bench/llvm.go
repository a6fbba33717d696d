package main

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
)

// Suite peer: goffload's host device against LLVM's offloading runtime
// (libomptarget with its host plugin, clang-22) on the same workloads,
// written as C with #pragma omp target in peer/peer.c. The C program is
// built here with clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu
// and run with OMP_TARGET_OFFLOAD=MANDATORY; it checks that its regions
// really run on a target device and that its results are right. Rounds
// alternate between the two; ratio = goffload ÷ LLVM. scripts/install-peer
// installs clang-22, libomp-22-dev and liboffload-22-dev (about 1 GB).
//
// peer.stencil_512's workload against plain goroutines is suite host's
// host.stencil_512_vs_goroutines: it needs no LLVM, and this suite skips
// where LLVM is missing.
func init() {
	register("peer", Suite{Devices: "host", Run: runPeerSuite, Skip: func() string {
		if _, err := exec.LookPath(clangPeer); err != nil {
			return clangPeer + " is not installed (scripts/install-peer installs it with libomp-22-dev and liboffload-22-dev)"
		}
		return peerToolchainMissing()
	}})
}

// peerToolchainMissing says why clang-22 cannot build an OpenMP offloading
// program here (clang-22 without libomp-22-dev or liboffload-22-dev), or
// "" if it can.
func peerToolchainMissing() string {
	dir, err := os.MkdirTemp("", "goffload-peercheck")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "check.c")
	if err := os.WriteFile(src, []byte("#include <omp.h>\nint main(void) {\n\tint x = 0;\n#pragma omp target map(tofrom: x)\n\tx = omp_get_num_devices();\n\treturn x;\n}\n"), 0o644); err != nil {
		return err.Error()
	}
	out, err := exec.Command(clangPeer, "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-o", filepath.Join(dir, "check"), src).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return fmt.Sprintf("%s cannot build an OpenMP offloading program (%v: %s); scripts/install-peer installs libomp-22-dev and liboffload-22-dev", clangPeer, err, msg)
	}
	return ""
}

const clangPeer = "clang-22"

//go:embed peer/peer.c
var peerSource []byte

// benchSaxpy is peer.saxpy_*'s kernel: y += a*x over the device's cores.
var benchSaxpy = offload.MustKernel3("bench.saxpy", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {
	ctx.For(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
}).Named("a", "x", "y")

// peerWorkload is one workload: run does n operations on dev and returns
// the time per operation.
type peerWorkload struct {
	name string
	run  func(dev offload.Device, n int) (float64, error)
}

func runPeerSuite(env *Env) error {
	dir, err := os.MkdirTemp("", "goffload-peer")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src, bin := filepath.Join(dir, "peer.c"), filepath.Join(dir, "peer")
	if err := os.WriteFile(src, peerSource, 0o644); err != nil {
		return err
	}
	args := []string{"-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-o", bin, src}
	if out, err := exec.Command(clangPeer, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", clangPeer, strings.Join(args, " "), err, out)
	}
	env.Comment("peer.*: LLVM %s (%s %s), OMP_TARGET_OFFLOAD=MANDATORY, host plugin; rounds alternate with goffload's host device; ratio = goffload ÷ LLVM", clangPeer, clangPeer, strings.Join(args[:3], " "))
	dev := offload.On(0)
	for _, w := range peerWorkloads {
		// Calibrate on goffload: enough operations for a round.
		if _, err := w.run(dev, 1); err != nil {
			return fmt.Errorf("peer.%s: %w", w.name, err)
		}
		one, err := w.run(dev, 1)
		if err != nil {
			return fmt.Errorf("peer.%s: %w", w.name, err)
		}
		per := env.Budget / time.Duration(max(env.Rounds, 1))
		n := int(max(1, min(1e6, float64(per.Nanoseconds())/max(one, 1))))
		var gt, pt []float64
		for range max(env.Rounds, 1) {
			p, err := runPeer(bin, w.name, n)
			if err != nil {
				return fmt.Errorf("peer.%s: %w", w.name, err)
			}
			g, err := w.run(dev, n)
			if err != nil {
				return fmt.Errorf("peer.%s: %w", w.name, err)
			}
			pt, gt = append(pt, p), append(gt, g)
		}
		env.Report(Result{Metric: "peer." + w.name, Goffload: median(gt), Baseline: median(pt),
			Note: fmt.Sprintf("%d ops per round; goffload host device vs LLVM host plugin", n)})
	}
	return nil
}

// runPeer runs the C program's workload for n operations: ns per op.
func runPeer(bin, workload string, n int) (float64, error) {
	cmd := exec.Command(bin, workload, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), "OMP_TARGET_OFFLOAD=MANDATORY")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return 0, fmt.Errorf("LLVM peer: %v: %s", err, strings.TrimSpace(stderr))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || !(v > 0) {
		return 0, fmt.Errorf("LLVM peer printed %q, want the ns per operation", out)
	}
	return v, nil
}

// timeOps runs op n times and returns the ns per operation.
func timeOps(n int, op func() error) (float64, error) {
	t0 := time.Now()
	for range n {
		if err := op(); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(t0).Nanoseconds()) / float64(n), nil
}

var peerWorkloads = []peerWorkload{
	{"empty_region", func(dev offload.Device, n int) (float64, error) {
		return timeOps(n, func() error { return dev.Run(benchEmpty) })
	}},
	{"map_tofrom_64MiB", func(dev offload.Device, n int) (float64, error) {
		buf := fill(make([]byte, size64MiB))
		start := buf[0]
		t, err := timeOps(n, func() error { return benchTouch.Run(dev, buf) })
		if err == nil && buf[0] != start+byte(n) {
			err = fmt.Errorf("buf[0] = %d after %d regions, want %d", buf[0], n, start+byte(n))
		}
		return t, err
	}},
	{"present_region_64MiB", func(dev offload.Device, n int) (float64, error) {
		buf := fill(make([]byte, size64MiB))
		buf[0] = 7
		if err := dev.EnterData(offload.To(buf).Named("buf")); err != nil {
			return 0, err
		}
		t, err := timeOps(n, func() error { return benchTouch.Run(dev, buf) })
		if xerr := dev.ExitData(offload.From(buf).Named("buf")); err == nil {
			err = xerr
		}
		if err == nil && buf[0] != 7+byte(n) {
			err = fmt.Errorf("buf[0] = %d after %d regions, want %d", buf[0], n, 7+byte(n))
		}
		return t, err
	}},
	{"saxpy_1Mi", func(dev offload.Device, n int) (float64, error) { return peerSaxpy(dev, n, 1<<20) }},
	{"saxpy_64Mi", func(dev offload.Device, n int) (float64, error) { return peerSaxpy(dev, n, 64<<20) }},
	{"stencil_512", func(dev offload.Device, n int) (float64, error) {
		want := stencilWant()
		var total time.Duration
		for range n {
			grid, t, err := jacobi.Solve([]offload.Device{dev}, stencilN, stencilIters)
			if err != nil {
				return 0, err
			}
			if err := jacobi.Check(grid, want, stencilN); err != nil {
				return 0, err
			}
			total += t
		}
		return float64(total.Nanoseconds()) / float64(n), nil
	}},
}

// The grid side and iterations of peer.stencil_512 and
// host.stencil_512_vs_goroutines.
const (
	stencilN     = 512
	stencilIters = 100
)

// stencilWant is peer.stencil_512's grid as plain Go computes it, once.
var stencilWant = sync.OnceValue(func() []float64 {
	want, _ := jacobi.Reference(stencilN, stencilIters)
	return want
})

// peerSaxpy: n synchronous regions of y += a*x over m elements, x mapped
// to, y tofrom, as peer.c does.
func peerSaxpy(dev offload.Device, n, m int) (float64, error) {
	x, y := make([]float32, m), make([]float32, m)
	for i := range x {
		x[i] = float32(i % 1000)
	}
	const a = 2.5
	t, err := timeOps(n, func() error {
		return benchSaxpy.Run(dev, float32(a), x, y)
	})
	for i := 0; err == nil && i < m; i += m/7 + 1 {
		if want := float32(n) * a * x[i]; math.Abs(float64(y[i]-want)) > 1e-3*math.Abs(float64(want)) {
			err = fmt.Errorf("saxpy: y[%d] = %g after %d regions, want %g", i, y[i], n, want)
		}
	}
	return t, err
}
