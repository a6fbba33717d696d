package main

import (
	"fmt"
	"math"

	"github.com/goffload/offload"
)

// Task Bench's kernels (core/core_kernel.cc) and its task body
// (TaskGraph::execute_point in core/core.cc), as goffload kernels
// registered at package level, so that every process of the bench (device
// processes, TCP devices, MPI ranks) has them.

// tbKernelKind numbers the kernels; the number travels in tbArgs.
type tbKernelKind int64

const (
	tbEmpty        tbKernelKind = iota // does nothing
	tbComputeBound                     // Task Bench's compute_bound: FMAs over 64 doubles
	tbMemoryBound                      // Task Bench's memory_bound: a scratch buffer swept
)

// tbKernelNames are the kernels' names, as Task Bench's -kernel takes them.
var tbKernelNames = map[tbKernelKind]string{tbEmpty: "empty", tbComputeBound: "compute_bound", tbMemoryBound: "memory_bound"}

// tbMagic fills a scratch buffer before the first task (Task Bench's
// MAGIC_VALUE); every task checks that the first word still holds it.
const tbMagic = 0x5C4A7C8B

// tbArgs are a task's scalar arguments: one struct parameter of the
// kernels, which goffload passes field by field.
type tbArgs struct {
	T, Point       int64 // the task
	Width          int64 // of the graph
	Pattern        int64 // tbPatternKind
	Radix, Period  int64 // of the pattern
	Kernel         int64 // tbKernelKind
	Iters, Samples int64 // the kernel's iterations; memory_bound's samples
}

func (a tbArgs) pattern() tbPattern {
	return tbPattern{Kind: tbPatternKind(a.Pattern), Radix: int(a.Radix), Period: int(a.Period)}
}

// tbExecute is Task Bench's execute_point: it checks that every input holds
// the (timestep, point) pairs of the task of timestep T-1 that it depends
// on, in the order of the pattern's dependencies, fills out with (T, Point)
// pairs, checks the scratch buffer's magic word and runs the kernel. A
// check that fails is an error naming the task, the input and what it
// held.
func tbExecute(a tbArgs, out, scratch []int64, in [][]int64) error {
	var buf [8]int
	deps := a.pattern().inputs(buf[:0], int(a.Width), int(a.T), int(a.Point))
	if len(deps) != len(in) {
		return fmt.Errorf("taskbench: task (t=%d, p=%d) of %s: %d inputs, want %d (points %v of t=%d)", a.T, a.Point, a.pattern().Name(), len(in), len(deps), deps, a.T-1)
	}
	for k, q := range deps {
		x := in[k]
		if len(x) == 0 || len(x)%2 != 0 {
			return fmt.Errorf("taskbench: task (t=%d, p=%d): input %d has %d int64s, want pairs", a.T, a.Point, k, len(x))
		}
		for i := 0; i < len(x); i += 2 {
			if x[i] != a.T-1 || x[i+1] != int64(q) {
				return fmt.Errorf("taskbench: task (t=%d, p=%d) of %s: input %d, pair %d holds (t=%d, p=%d), want (t=%d, p=%d): the output of another task, or none, reached it",
					a.T, a.Point, a.pattern().Name(), k, i/2, x[i], x[i+1], a.T-1, q)
			}
		}
	}
	if len(out) == 0 || len(out)%2 != 0 {
		return fmt.Errorf("taskbench: task (t=%d, p=%d): output of %d int64s, want pairs", a.T, a.Point, len(out))
	}
	for i := 0; i < len(out); i += 2 {
		out[i], out[i+1] = a.T, a.Point
	}
	if len(scratch) > 0 && scratch[0] != tbMagic {
		return fmt.Errorf("taskbench: task (t=%d, p=%d): scratch word 0 holds %#x, want the magic %#x", a.T, a.Point, scratch[0], tbMagic)
	}
	switch tbKernelKind(a.Kernel) {
	case tbEmpty:
	case tbComputeBound:
		if r := tbCompute(a.Iters); r < 0 { // never: keeps the loop
			return fmt.Errorf("taskbench: compute_bound gave %v", r)
		}
	case tbMemoryBound:
		return tbMemory(scratch, a.Iters, a.Samples, a.T)
	default:
		return fmt.Errorf("taskbench: unknown kernel %d", a.Kernel)
	}
	return nil
}

// tbCompute is Task Bench's compute_bound kernel: iters times an FMA
// (a = a·a + a) on each of 64 doubles, 2·64 FLOPs an iteration (Task
// Bench's AVX2 version does the same on 16 vectors of 4 with
// _mm256_fmadd_pd; its portable one on 64 doubles). It returns the product
// of the 64 (+Inf after a few iterations, never negative), as Task Bench's
// does, so that the loop is kept.
//
//go:noinline
func tbCompute(iters int64) float64 {
	var a [64]float64
	for i := range a {
		a[i] = 1.2345
	}
	for range iters {
		for i := range a {
			a[i] = math.FMA(a[i], a[i], a[i])
		}
	}
	dot := 1.0
	for _, v := range a {
		dot *= v
	}
	return dot
}

// tbMemory is Task Bench's memory_bound kernel: the scratch buffer is
// samples samples; iteration i of timestep t copies the first half of
// sample (t·iters + i) mod samples onto its second half, so that a task
// moves scratch ÷ samples bytes an iteration (Task Bench's
// count_bytes_per_task: scratch × iterations ÷ samples).
func tbMemory(scratch []int64, iters, samples, t int64) error {
	if samples < 1 || int64(len(scratch))%samples != 0 || (int64(len(scratch))/samples)%2 != 0 {
		return fmt.Errorf("taskbench: memory_bound: %d int64s of scratch in %d samples: want samples of an even length", len(scratch), samples)
	}
	n := int64(len(scratch)) / samples
	for i := range iters {
		s := (t*iters + i) % samples
		x := scratch[s*n : (s+1)*n]
		copy(x[n/2:], x[:n/2])
	}
	return nil
}

// tbMaxInputs is the most inputs a task of the device kinds can have: one
// kernel per input count, up to MustKernel8's eight parameters.
const tbMaxInputs = 5

// tbRun runs tbExecute in a kernel and panics with its error: the task
// fails with ErrKernelFailed, the run with it.
func tbRun(a tbArgs, out, scratch []int64, in ...[]int64) {
	if err := tbExecute(a, out, scratch, in); err != nil {
		panic(err)
	}
}

// The kernels of a task with 0 to tbMaxInputs inputs: the output
// (map(from), present on the task's device), the scratch buffer (present)
// and the inputs (map(to), present: copies the suite moved there).
var (
	tbTask0 = offload.MustKernel3("taskbench.task0", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64]) {
		tbRun(a, out, s)
	})
	tbTask1 = offload.MustKernel4("taskbench.task1", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0 offload.In[int64]) {
		tbRun(a, out, s, i0)
	})
	tbTask2 = offload.MustKernel5("taskbench.task2", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1 offload.In[int64]) {
		tbRun(a, out, s, i0, i1)
	})
	tbTask3 = offload.MustKernel6("taskbench.task3", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2 offload.In[int64]) {
		tbRun(a, out, s, i0, i1, i2)
	})
	tbTask4 = offload.MustKernel7("taskbench.task4", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2, i3 offload.In[int64]) {
		tbRun(a, out, s, i0, i1, i2, i3)
	})
	tbTask5 = offload.MustKernel8("taskbench.task5", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2, i3, i4 offload.In[int64]) {
		tbRun(a, out, s, i0, i1, i2, i3, i4)
	})
)

// tbLaunch launches the task a as a task of nw with the kernel for
// len(in) inputs.
func tbLaunch(nw offload.Async, a tbArgs, out, scratch []int64, in [][]int64) *offload.Task {
	switch len(in) {
	case 0:
		return tbTask0.Nowait(nw, a, out, scratch)
	case 1:
		return tbTask1.Nowait(nw, a, out, scratch, in[0])
	case 2:
		return tbTask2.Nowait(nw, a, out, scratch, in[0], in[1])
	case 3:
		return tbTask3.Nowait(nw, a, out, scratch, in[0], in[1], in[2])
	case 4:
		return tbTask4.Nowait(nw, a, out, scratch, in[0], in[1], in[2], in[3])
	case 5:
		return tbTask5.Nowait(nw, a, out, scratch, in[0], in[1], in[2], in[3], in[4])
	}
	panic(fmt.Sprintf("taskbench: %d inputs, at most %d", len(in), tbMaxInputs))
}
