// Package offload is an OpenMP-target-style offloading runtime for Go: a
// program hands kernels and data buffers to devices — the host CPU, CPU
// processes elsewhere, GPUs — with the semantics OpenMP programmers know from
// target, target data, target enter/exit data and target update.
//
// # Kernels
//
// A kernel is a Go function registered by name at package init; every process
// of the program registers the same table (the offload entries table). The
// typed form, [MustKernel0] … [MustKernel8], makes every launch checked by
// the compiler, and the parameter types say how each buffer moves:
//
//	var Saxpy = offload.MustKernel3("saxpy", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {
//		ctx.For(len(y), func(lo, hi int) {
//			for i := lo; i < hi; i++ {
//				y[i] += a * x[i]
//			}
//		})
//	})
//
//	err := Saxpy.Run(offload.Default(), 2, x, y) // x copied in, y in and back
//
// Scalars (bool, integers, floats, complex numbers, arrays and structs of
// them) are passed by value; slices of such elements are device buffers:
// [In] (map to), [Out] (from), [InOut] (tofrom), [Scratch] (alloc), or a
// plain []T (an implicit tofrom, used as is when present). A struct of
// scalars and slices is passed with its slices mapped and attached. The first
// parameter, of type [Ctx], splits a loop over the device's cores ([Reduce]
// for reductions) and tells which device the kernel runs on. [MustKernel]
// and [Device.Run] are the untyped form, checked at run time, for generated
// or dynamic code.
//
// # Devices
//
// Devices are numbered from 0 ([NumDevices] of them); the initial device,
// number NumDevices(), is the calling process itself. [On] picks a device by
// number, [Default] the one OMP_DEFAULT_DEVICE names. Which devices exist is
// set by GOFFLOAD_DEVICES; OMP_TARGET_OFFLOAD says what happens when a device
// is unavailable.
//
// Device processes are this same program in a device role: started by the
// runtime on this machine (local:N), listening on TCP elsewhere (tcp://), or
// the ranks of an MPI job (mpi, in a build with -tags mpi run by mpirun,
// mpiexec or srun: rank 0 is the host, the other ranks are devices, see
// [UnderMPI]). [Start] serves in a device process and never returns there.
//
// # Mapping
//
// Each device has a present table of mapped host buffers with reference
// counts, following OpenMP and libomptarget: the first map of a buffer
// allocates device memory and copies in (to), the last unmap copies out
// (from) and frees it. Slices passed to a kernel without a clause are mapped
// tofrom for the region unless present already. [To], [From], [ToFrom],
// [Alloc], [Release] and [Delete] are the map clauses, with the [Map.Always],
// [Map.Present] and [Map.Hold] modifiers; a sub-slice is an array section.
package offload
