// Package offload is an OpenMP-target-style offloading runtime for Go.
// A program hands kernels and data buffers to devices: the host CPU, CPU
// processes elsewhere, GPUs. The semantics are those OpenMP programmers know
// from target, target data, target enter/exit data and target update.
//
// # Kernels
//
// A kernel is a Go function registered by name at package init.
// Every process of the program registers the same table (the offload
// entries table). The typed form, [MustKernel1] … [MustKernel8], has every
// launch checked by the compiler. Its parameter types say how each buffer
// moves:
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
// Scalars are passed by value: bool, integers, floats, complex numbers,
// and arrays and structs of them. Slices of such elements are device
// buffers: [In] (map to), [Out] (from), [InOut] (tofrom) and [Scratch]
// (alloc). A plain []T is an implicit tofrom, used as is when present.
// A struct of scalars and slices is passed with its slices mapped and
// attached. The first parameter, of type [Ctx], splits a loop over the
// device's cores ([Reduce] for reductions, with the operators of package
// reduction). It also tells which device the kernel runs on. [MustKernel]
// and [Device.Run] are the untyped form, checked at run time, for
// generated or dynamic code, and for a kernel of no parameters.
//
// # Devices
//
// Devices are numbered from 0, and [NumDevices] says how many there are.
// The initial device, number NumDevices(), is the calling process itself.
// [On] picks a device by number, and [Default] the one OMP_DEFAULT_DEVICE
// names. GOFFLOAD_DEVICES sets which devices exist. OMP_TARGET_OFFLOAD says
// what happens when a device is unavailable.
//
// Device processes are this same program in a device role. The runtime
// starts them on this machine (local:N), or they listen on TCP elsewhere
// (tcp://), or they are the ranks of an MPI job (mpi). An MPI job needs a
// build with -tags mpi, run by mpirun, mpiexec or srun. Its rank 0 is the
// host and the other ranks are devices (see the role package's UnderMPI).
// [Start] serves in a device process and never returns there.
//
// # Mapping
//
// Each device has a present table of mapped host buffers with reference
// counts, as in OpenMP and libomptarget. The first map of a buffer
// allocates device memory and copies in (to). The last unmap copies out
// (from) and frees it. Slices passed to a kernel without a clause are
// mapped tofrom for the region, unless already present. The map clauses are
// [To], [From], [ToFrom], [Alloc], [Release] and [Delete]. Their modifiers
// are [Map.Always], [Map.Present] and [Map.Hold]. A sub-slice is an array
// section.
package offload
