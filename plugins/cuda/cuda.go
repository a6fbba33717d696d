// Package cuda is the CUDA device kind: NVIDIA GPUs through the CUDA driver
// API. It loads the driver at run time (libcuda.so.1, with purego): no cgo,
// no CUDA headers or toolkit to build. Programs get the kind by importing
// package offload, which imports this package.
//
// Spec in GOFFLOAD_DEVICES: "cuda" (every GPU) or "cuda:N" (GPU N, as the
// driver numbers them; CUDA_VISIBLE_DEVICES applies). When GOFFLOAD_DEVICES
// is unset, every GPU is discovered, before the host device (Order 10). With
// no driver, or no GPU, the kind has no devices. Discovery, and the spec
// "cuda", say why in the info output (GOFFLOAD_INFO=offload) and go on. Under
// OMP_TARGET_OFFLOAD=MANDATORY, a spec naming cuda makes Start fail with the
// reason. GOFFLOAD_CUDA_LIBRARY names another driver library than
// libcuda.so.1.
//
// # Devices
//
// Each device works in its GPU's primary context, the one the CUDA runtime
// uses too. So two devices may share a GPU ("cuda:0,cuda:0"). Info gives the
// GPU's name, compute capability (Arch "sm_90"), memory, multiprocessors
// (Cores) and the driver version (in Name).
//
// # Kernels
//
// A GPU cannot run a kernel's Go body. It runs the kernel's PTX, which the
// program registers with the kernel (offload.Kernel.PTX, plugin.Kernel.Code
// "ptx"). Load loads each distinct PTX image once per device
// (cuModuleLoadData). It looks each kernel's entry up (cuModuleGetFunction).
// A kernel without PTX does not stop the device from loading. But launching
// it on the device fails with an error naming the kernel (wrapping
// plugin.ErrBadKernel and plugin.ErrUnsupported). So does launching a kernel
// whose PTX did not load.
//
// A launch passes the kernel's parameters in order (plugin.Kernel.Params:
// after the Ctx, a struct holding slices as its fields). Each goes as the PTX
// entry declares it:
//
//   - a slice: its device address, 8 bytes (.param .u64); its length is
//     not passed (give it as a scalar parameter);
//   - bool, int8, uint8: 1 byte (.u8/.s8); int16, uint16: 2 (.u16/.s16);
//     int32, uint32, float32: 4 (.u32/.s32/.f32); int, uint, int64, uint64,
//     uintptr, float64: 8 (.u64/.s64/.f64) — Go's int is 64 bits;
//   - complex64, complex128, arrays and structs of plain data: their bytes
//     in Go's layout (which is C's for these types), as
//     ".param .align A .b8 name[S]" with A and S Go's alignment and size of
//     the type (complex64: align 4, size 8; complex128: 8, 16).
//
// A parameter of size 0 cannot be passed: PTX has none. By default the grid
// is one-dimensional, with blocks of 256 threads. It has as many blocks as
// needed for one thread per element of the longest slice argument the kernel
// may write, and at least one. (That is any slice but offload.In, or its
// longest slice if it writes none.) num_teams and thread_limit give the grid
// and block. A global size gives the threads (in whole blocks). The kernel
// must check its index against its length parameter.
//
// CUDA has no global offset. An entry may have one or three .u64 or .s64
// parameters after the Go parameters' ones. It takes the launch's offset
// there: x, or x, y and z; 0 without one. An offset for an entry without them
// is an error.
//
// # Memory and queues
//
// Device memory comes from cuMemAlloc, through a pool of freed blocks by
// size. A queue is a stream. A goroutine of the queue enqueues copies,
// launches, event records and waits on it in order. (For a synchronous
// construct, the caller does: plugin.InlineQueue.) Host memory is copied
// through pinned staging buffers (cuMemHostAlloc), in chunks. So the
// program's Go memory is never handed to the driver. A Submit reads the
// source when the queue reaches it. A Retrieve has written its destination
// before anything after it in the queue runs. So an event recorded after a
// Retrieve fires once the data is in host memory.
//
// Exchange copies within a GPU with cuMemcpyDtoDAsync and between GPUs with
// cuMemcpyPeerAsync. The copy is direct where the GPUs allow peer access,
// enabled at their first copy. Else it goes through host memory. Events are
// CUDA events. A queue waits for an event of any CUDA device with
// cuStreamWaitEvent (plugin.ForeignEventWaiter). The core learns that a
// task's event fired from one goroutine per device. It polls the watched
// events with cuEventQuery (plugin.FireNotifier). No goroutine per task
// blocks in cuEventSynchronize.
//
// A kernel that faults leaves the GPU's context unusable (a sticky CUDA
// error). The device reports itself lost (plugin.LostReporter) with the
// error, and every later operation on it fails.
package cuda

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:     "cuda",
		Open:     openSpec,
		Discover: func() ([]plugin.Device, error) { return openSpec("") },
		Order:    10,
		Help:     "cuda[:N]  NVIDIA GPUs through the CUDA driver: every GPU, or GPU N",
	})
}

// LibraryEnv names the environment variable that overrides the driver
// library's path.
const LibraryEnv = "GOFFLOAD_CUDA_LIBRARY"

// library is the driver library to load.
func library() string { return gpukind.LibraryPath(LibraryEnv, cudadrv.DefaultLibrary) }

// loadDriver loads the driver library at path; tests replace it.
var loadDriver = func(path string) (cudadrv.Driver, error) { return cudadrv.Load(path) }

// A driverState is a loaded and initialized driver, or why there is none.
type driverState struct {
	drv     cudadrv.Driver
	count   int // GPUs
	version int // cuDriverGetVersion: 12040 is 12.4
	err     error
	emulate bool // UseEmulatedDriverForTests: devices run Go bodies of kernels without PTX
}

var drivers gpukind.Drivers[driverState]

// override is the driver UseDriverForTests gives, if not nil.
var override struct {
	sync.Mutex
	s *driverState
}

// getDriver loads and initializes the driver library at path once per
// process: cuInit cannot be undone. A driver with no GPU is not an error:
// count is 0 and err says why.
func getDriver(path string) *driverState {
	override.Lock()
	s := override.s
	override.Unlock()
	if s != nil {
		return s
	}
	return drivers.Get(path, initDriver)
}

func initDriver(path string) *driverState {
	drv, err := loadDriver(path)
	if err != nil {
		return &driverState{err: gpukind.LoadFailure(err, path, "NVIDIA driver", "NVIDIA driver")}
	}
	return initWith(drv)
}

// initWith initializes a loaded driver.
func initWith(drv cudadrv.Driver) *driverState {
	s := &driverState{drv: drv}
	if err := drv.Init(); err != nil {
		if cudadrv.Code(err) == cudadrv.ErrNoDevice {
			s.err = fmt.Errorf("no NVIDIA GPU (%w)", err)
		} else {
			s.err = fmt.Errorf("the NVIDIA driver does not start: %w", err)
		}
		return s
	}
	s.version, _ = drv.DriverGetVersion()
	n, err := drv.DeviceGetCount()
	if err != nil {
		s.err = fmt.Errorf("the NVIDIA driver cannot count its GPUs: %w", err)
		return s
	}
	s.count = n
	if n == 0 {
		s.err = fmt.Errorf("no NVIDIA GPU (cuDeviceGetCount: 0)")
	}
	return s
}

// openSpec opens the devices of "cuda" (arg "": every GPU) or "cuda:N".
func openSpec(arg string) ([]plugin.Device, error) {
	ord, err := gpukind.SpecNumber("cuda", arg, "cuda (every GPU) or cuda:N with N a GPU number from 0")
	if err != nil {
		return nil, err
	}
	s := getDriver(library())
	if s.err != nil {
		return nil, gpukind.NoDriver(s.err, ord < 0)
	}
	return openDevices(s, ord)
}

// Driver returns the driver the kind uses and its number of GPUs, or why
// there is no GPU to use. The driver is GOFFLOAD_CUDA_LIBRARY, or
// libcuda.so.1, loaded and initialized once. It is for this module's bench,
// whose raw baselines call the driver API directly.
func Driver() (cudadrv.Driver, int, error) {
	s := getDriver(library())
	if s.err != nil {
		return nil, 0, s.err
	}
	return s.drv, s.count, nil
}

// UseDriverForTests makes the kind use drv, initialized once, instead of
// loading the driver library, until restore is called. GOFFLOAD_DEVICES=cuda
// then opens drv's GPUs. It is for this module's tests, which give it a fake
// driver (internal/cudadrv/cudafake). A program has no use for it.
func UseDriverForTests(drv cudadrv.Driver) (restore func()) {
	return useDriver(initWith(drv))
}

// UseEmulatedDriverForTests is UseDriverForTests with the devices in the
// emulate mode. A kernel without PTX runs its Go body on the host over copies
// of its arguments' device memory, in its queue's order, instead of failing.
// It is for this module's tests that run the runtime's semantics on fake GPUs
// with kernels written in Go only. (That is the root package's device matrix,
// matrix_test.go.) A program has no use for it.
func UseEmulatedDriverForTests(drv cudadrv.Driver) (restore func()) {
	s := initWith(drv)
	s.emulate = true
	return useDriver(s)
}

// useDriver makes the kind use s until restore is called.
func useDriver(s *driverState) (restore func()) {
	override.Lock()
	old := override.s
	override.s = s
	override.Unlock()
	return func() {
		override.Lock()
		override.s = old
		override.Unlock()
	}
}

// openDevices opens GPU ord of s's driver, or every GPU if ord is -1.
func openDevices(s *driverState, ord int) ([]plugin.Device, error) {
	if ord >= s.count {
		return nil, fmt.Errorf("cuda:%d: there is no GPU %d: the driver has %d (0 to %d)", ord, ord, s.count, s.count-1)
	}
	ords := []int{ord}
	if ord < 0 {
		ords = ords[:0]
		for i := range s.count {
			ords = append(ords, i)
		}
	}
	var devs []plugin.Device
	for _, o := range ords {
		d, err := newDevice(s.drv, o, s.version)
		if err != nil {
			return devs, err
		}
		d.Emulate = s.emulate
		devs = append(devs, d)
	}
	return devs, nil
}
