package main

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

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

// A task's checks and work are functions in the subset that goffload-gen
// translates (docs/kernels.md): the kernels below run them on CPU devices
// as Go and on OpenCL devices as the OpenCL C made from them
// (zz_offload_gen.go), and tbExecute runs the same in the goroutines
// baseline. A kernel's check that fails panics with an error naming the
// task, the input and what it held (built on CPU devices only: an OpenCL
// device evaluates no panic value), so the launch fails with
// ErrKernelFailed naming the kernel and the check's line; tbExecute
// returns the same error.

// tbNumInputs is how many inputs task a reads: none at timestep 0.
func tbNumInputs(a tbArgs) int {
	if a.T == 0 {
		return 0
	}
	g := tbPattern{Kind: tbPatternKind(a.Pattern), Radix: int(a.Radix), Period: int(a.Period)}
	return tbDepCount(g, int(a.Width), tbDset(g, int(a.T)), int(a.Point))
}

// tbInputPoint is the point of timestep a.T-1 whose output is input k of
// task a.
func tbInputPoint(a tbArgs, k int) int {
	g := tbPattern{Kind: tbPatternKind(a.Pattern), Radix: int(a.Radix), Period: int(a.Period)}
	return tbDep(g, int(a.Width), tbDset(g, int(a.T)), int(a.Point), k)
}

// tbInputFault says what is wrong with x, input k of task a: -1 nothing,
// -2 it is not pairs (empty, or of an odd length), else the first pair
// that is not (a.T-1, the input's point).
func tbInputFault(a tbArgs, k int, x []int64) int {
	if len(x) == 0 || len(x)%2 != 0 {
		return -2
	}
	q := int64(tbInputPoint(a, k))
	for i := 0; i < len(x); i += 2 {
		if x[i] != a.T-1 || x[i+1] != q {
			return i / 2
		}
	}
	return -1
}

// What tbTaskFault finds wrong with a task's output, scratch or kernel.
const (
	tbTaskOK     = iota
	tbBadOutput  // not pairs
	tbBadScratch // word 0 is not tbMagic
	tbBadSamples // memory_bound's samples do not cut the scratch evenly
	tbUnknownKernel
)

// tbTaskFault checks task a's output (pairs), its scratch buffer's magic
// word and its kernel's parameters, in that order, and says what it found
// wrong first (tbTaskOK: nothing).
func tbTaskFault(a tbArgs, out, scratch []int64) int {
	if len(out) == 0 || len(out)%2 != 0 {
		return tbBadOutput
	}
	if len(scratch) > 0 && scratch[0] != tbMagic {
		return tbBadScratch
	}
	switch tbKernelKind(a.Kernel) {
	case tbEmpty, tbComputeBound:
	case tbMemoryBound:
		n := int64(len(scratch))
		if a.Samples < 1 || n%a.Samples != 0 || (n/a.Samples)%2 != 0 {
			return tbBadSamples
		}
	default:
		return tbUnknownKernel
	}
	return tbTaskOK
}

// tbWork fills out with (a.T, a.Point) pairs and runs the kernel, whose
// parameters tbTaskFault found right. It reports false if compute_bound
// gave a negative product (never: the test keeps the loop, on a device
// too).
func tbWork(a tbArgs, out, scratch []int64) bool {
	for i := 0; i < len(out); i += 2 {
		out[i] = a.T
		out[i+1] = a.Point
	}
	switch tbKernelKind(a.Kernel) {
	case tbComputeBound:
		if tbCompute(a.Iters) < 0 {
			return false
		}
	case tbMemoryBound:
		tbMemory(scratch, a.Iters, a.Samples, a.T)
	}
	return true
}

// tbCheckInputs panics unless task a reads n inputs.
func tbCheckInputs(a tbArgs, n int) {
	if tbNumInputs(a) != n {
		panic(tbInputsError(a, n))
	}
}

// tbCheckInput panics unless x, input k of task a, holds the pairs of the
// task it depends on.
func tbCheckInput(a tbArgs, k int, x []int64) {
	if tbInputFault(a, k, x) != -1 {
		panic(tbInputError(a, k, x))
	}
}

// tbTask checks task a's output, scratch and kernel, and runs it: the rest
// of Task Bench's execute_point once the inputs are checked.
func tbTask(a tbArgs, out, scratch []int64) {
	if f := tbTaskFault(a, out, scratch); f != tbTaskOK {
		panic(tbTaskError(a, f, out, scratch))
	}
	if !tbWork(a, out, scratch) {
		panic(tbComputeError(a))
	}
}

// tbExecute is Task Bench's execute_point: it checks that every input holds
// the (timestep, point) pairs of the task of timestep T-1 that it depends
// on, in the order of the pattern's dependencies, checks the output, the
// scratch buffer's magic word and the kernel's parameters, fills out with
// (T, Point) pairs and runs the kernel. A check that fails is an error
// naming the task, the input and what it held. It runs the kernels'
// checks and work (the goroutines baseline runs no kernels).
func tbExecute(a tbArgs, out, scratch []int64, in [][]int64) error {
	if tbNumInputs(a) != len(in) {
		return tbInputsError(a, len(in))
	}
	for k, x := range in {
		if tbInputFault(a, k, x) != -1 {
			return tbInputError(a, k, x)
		}
	}
	if f := tbTaskFault(a, out, scratch); f != tbTaskOK {
		return tbTaskError(a, f, out, scratch)
	}
	if !tbWork(a, out, scratch) {
		return tbComputeError(a)
	}
	return nil
}

// tbInputsError is the error of task a given n inputs, not its pattern's.
func tbInputsError(a tbArgs, n int) error {
	var buf [8]int
	deps := a.pattern().inputs(buf[:0], int(a.Width), int(a.T), int(a.Point))
	return fmt.Errorf("taskbench: task (t=%d, p=%d) of %s: %d inputs, want %d (points %v of t=%d)", a.T, a.Point, a.pattern().Name(), n, len(deps), deps, a.T-1)
}

// tbInputError is the error of x, input k of task a, as tbInputFault finds
// it.
func tbInputError(a tbArgs, k int, x []int64) error {
	i := tbInputFault(a, k, x)
	if i == -2 {
		return fmt.Errorf("taskbench: task (t=%d, p=%d): input %d has %d int64s, want pairs", a.T, a.Point, k, len(x))
	}
	if i < 0 {
		return fmt.Errorf("taskbench: task (t=%d, p=%d): input %d holds what it should", a.T, a.Point, k)
	}
	return fmt.Errorf("taskbench: task (t=%d, p=%d) of %s: input %d, pair %d holds (t=%d, p=%d), want (t=%d, p=%d): the output of another task, or none, reached it",
		a.T, a.Point, a.pattern().Name(), k, i, x[2*i], x[2*i+1], a.T-1, tbInputPoint(a, k))
}

// tbTaskError is the error of fault f (tbTaskFault's) of task a.
func tbTaskError(a tbArgs, f int, out, scratch []int64) error {
	switch f {
	case tbBadOutput:
		return fmt.Errorf("taskbench: task (t=%d, p=%d): output of %d int64s, want pairs", a.T, a.Point, len(out))
	case tbBadScratch:
		return fmt.Errorf("taskbench: task (t=%d, p=%d): scratch word 0 holds %#x, want the magic %#x", a.T, a.Point, scratch[0], tbMagic)
	case tbBadSamples:
		return fmt.Errorf("taskbench: memory_bound: %d int64s of scratch in %d samples: want samples of an even length", len(scratch), a.Samples)
	}
	return fmt.Errorf("taskbench: unknown kernel %d", a.Kernel)
}

// tbComputeError is the error of a compute_bound kernel whose product was
// negative (never).
func tbComputeError(a tbArgs) error {
	return fmt.Errorf("taskbench: compute_bound gave %v", tbCompute(a.Iters))
}

// tbCompute is Task Bench's compute_bound kernel: iters times an FMA
// (a = a·a + a) on each of 64 doubles, 2·64 FLOPs an iteration (Task
// Bench's AVX2 version does the same on 16 vectors of 4 with
// _mm256_fmadd_pd; its portable one on 64 doubles). It returns the product
// of the 64 (+Inf after a few iterations, never negative), as Task Bench's
// does, so that the loop is kept. math.FMA is exact on both sides (OpenCL
// C's fma too).
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
// samples samples (of an even length: tbTaskFault checks it); iteration i
// of timestep t copies the first half of sample (t·iters + i) mod samples
// onto its second half, so that a task moves scratch ÷ samples bytes an
// iteration (Task Bench's count_bytes_per_task: scratch × iterations ÷
// samples).
func tbMemory(scratch []int64, iters, samples, t int64) {
	n := int64(len(scratch)) / samples
	h := n / 2
	for i := range iters {
		s := (t*iters + i) % samples
		x := scratch[s*n : (s+1)*n]
		for j := range h {
			x[h+j] = x[j]
		}
	}
}

// tbMaxInputs is the most inputs a task of the device kinds can have: one
// kernel per input count, up to MustKernel8's eight parameters.
const tbMaxInputs = 5

// The kernels of a task with 0 to tbMaxInputs inputs: the output
// (map(from), present on the task's device), the scratch buffer (present)
// and the inputs (map(to), present: copies the suite moved there).
var (
	tbTask0 = offload.MustKernel3("taskbench.task0", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64]) {
		tbCheckInputs(a, 0)
		tbTask(a, out, s)
	})
	tbTask1 = offload.MustKernel4("taskbench.task1", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0 offload.In[int64]) {
		tbCheckInputs(a, 1)
		tbCheckInput(a, 0, i0)
		tbTask(a, out, s)
	})
	tbTask2 = offload.MustKernel5("taskbench.task2", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1 offload.In[int64]) {
		tbCheckInputs(a, 2)
		tbCheckInput(a, 0, i0)
		tbCheckInput(a, 1, i1)
		tbTask(a, out, s)
	})
	tbTask3 = offload.MustKernel6("taskbench.task3", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2 offload.In[int64]) {
		tbCheckInputs(a, 3)
		tbCheckInput(a, 0, i0)
		tbCheckInput(a, 1, i1)
		tbCheckInput(a, 2, i2)
		tbTask(a, out, s)
	})
	tbTask4 = offload.MustKernel7("taskbench.task4", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2, i3 offload.In[int64]) {
		tbCheckInputs(a, 4)
		tbCheckInput(a, 0, i0)
		tbCheckInput(a, 1, i1)
		tbCheckInput(a, 2, i2)
		tbCheckInput(a, 3, i3)
		tbTask(a, out, s)
	})
	tbTask5 = offload.MustKernel8("taskbench.task5", func(_ offload.Ctx, a tbArgs, out offload.Out[int64], s offload.InOut[int64], i0, i1, i2, i3, i4 offload.In[int64]) {
		tbCheckInputs(a, 5)
		tbCheckInput(a, 0, i0)
		tbCheckInput(a, 1, i1)
		tbCheckInput(a, 2, i2)
		tbCheckInput(a, 3, i3)
		tbCheckInput(a, 4, i4)
		tbTask(a, out, s)
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
