// Package opencl is the OpenCL device kind. It reaches any vendor's OpenCL
// devices (GPUs, accelerators, and CPUs such as PoCL's) through the ICD
// loader. It loads the loader at run time (libOpenCL.so.1, with purego): no
// cgo, no OpenCL headers to build. Programs get the kind by importing package
// offload, which imports this package.
//
// The kind numbers the OpenCL devices of every platform GPUs first, then
// accelerators, then CPUs (such as PoCL's). Within a type, it follows the
// loader's platform order and each platform's device order. So a machine with
// PoCL beside a GPU's driver has the GPU as device 0.
//
// Spec in GOFFLOAD_DEVICES: "opencl" is every device, in that order, CPUs
// included. "opencl:N" is device N of that order. "opencl:gpu",
// "opencl:accelerator" and "opencl:cpu" are every device of that type, in
// that order. None is no devices, as "opencl" with none.
//
// When GOFFLOAD_DEVICES is unset, the kind's GPUs and accelerators are
// discovered after the CUDA GPUs (Order 20). An NVIDIA OpenCL device is left
// out while the cuda kind has GPUs: it is one of them. CPU devices are used
// only when named. With no library, no platform or no device, the kind has
// none. Discovery, and the spec "opencl", say why in the info output
// (GOFFLOAD_INFO=offload). GOFFLOAD_OPENCL_LIBRARY names another library than
// libOpenCL.so.1.
//
// # Devices
//
// The devices of a platform share one OpenCL context, made when the first of
// them opens and kept for the process. So a queue of one waits on another's
// events in the driver (clEnqueueBarrierWithWaitList). It copies between them
// with the driver's copy. Two devices may be one OpenCL device
// ("opencl:0,opencl:0"). Info gives the device's name, platform, OpenCL
// version, compute units (Cores) and global memory.
//
// # Kernels
//
// A kernel runs on an OpenCL device through its OpenCL C
// (offload.Kernel.OpenCL, plugin.Kernel.Code "opencl"). It is built for the
// device when it loads the image, with -cl-kernel-arg-info. Where that fails
// and a build without it passes, it is built without. (NVIDIA's compiler did
// so for a kernel without parameters.) Its parameters are then checked by
// count and size only. Each distinct source is built once per OpenCL device
// in the process, and kept.
//
// A source that does not build fails its kernels' launches with the build log
// in the error; the log names the line. So does an entry the program lacks,
// or one whose parameters do not take the kernel's Go parameters. They are
// checked against clGetKernelArgInfo, and by clSetKernelArg with each
// by-value parameter's size. The size of a struct or typedef that the
// argument info names is measured by a probe kernel's sizeof (sizes.go). The
// error names the kernel, the entry, the parameter and both types, wrapping
// plugin.ErrBadKernel. A kernel with no OpenCL C fails its launches likewise
// (plugin.ErrUnsupported).
//
// A launch passes the kernel's parameters in order. A slice goes as a
// __global pointer to its element type; its length is not passed. A scalar
// goes by value as its bytes in Go's layout. Go's int is OpenCL C's long.
// bool is uchar, as OpenCL C has no bool parameters. A struct or array goes
// by value as a struct of the same layout.
//
// Work-items: by default, one per element of the longest slice argument the
// kernel may write, in one dimension. (That is any slice but offload.In, or
// its longest slice if it writes none.) The work-groups are then of the
// driver's choice. The launch may give a global size instead: the work-items.
// It may give num_teams/thread_limit: then thread_limit is the work-group and
// num_teams×thread_limit the global size. It may give both a global size and
// thread_limit: then the size is rounded up to whole work-groups. A global
// offset is clEnqueueNDRangeKernel's global_work_offset.
//
// # Memory and queues
//
// Device memory is shared virtual memory (clSVMAlloc) where the device has it
// and GOFFLOAD_OPENCL_SVM is not 0. On NVIDIA's platform it is so only where
// the variable is 1 (see useSVM). A device address is then the SVM pointer,
// and a slice inside an allocation is passed as its address. Elsewhere it is
// buffers (clCreateBuffer), whose addresses the kind makes up. A slice at an
// offset inside one is passed as a sub-buffer. A sub-buffer must start at a
// multiple of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN. A launch that needs
// one that does not is refused with an error saying so.
//
// A queue is an in-order command queue (with profiling). Operations are
// issued in order by a goroutine of the queue while it has work, or by the
// caller (plugin.InlineQueue). Copies to and from Go memory are asynchronous.
// The Go memory is pinned (runtime.Pinner) until the driver is done with it.
// A retrieve before a submit may write the submit's host memory, and so may
// one before a waited-for event. Such a submit waits for it first
// (hostWrites). Drivers that read a write's host memory when it is enqueued
// (NVIDIA's) need that.
//
// Exchange copies within a platform's context (clEnqueueSVMMemcpy,
// clEnqueueCopyBuffer). Events are cl_events of markers. A queue waits on an
// event of any device of its platform with a barrier
// (plugin.ForeignEventWaiter). A device's poller fires OnFire's functions. A
// failure the driver reports when work runs leaves the device lost
// (plugin.LostReporter). Such a failure is a negative event status, or a
// failing clFinish. On GPU drivers the context is unusable then.
package opencl

import (
	"fmt"
	"strings"
	"sync"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:     "opencl",
		Open:     openSpec,
		Discover: discover,
		Order:    20,
		Help:     "opencl[:N|:gpu|:accelerator|:cpu]  OpenCL devices of every platform, GPUs first, then accelerators, then CPUs: every device, device N, or every device of a type",
	})
}

// Environment variables of the kind.
const (
	// LibraryEnv overrides the OpenCL library's path.
	LibraryEnv = "GOFFLOAD_OPENCL_LIBRARY"
	// SVMEnv set to 0 makes the devices use buffers even where they have
	// shared virtual memory, as a device without it does. Set to 1, it makes
	// them use SVM wherever they have it. That includes NVIDIA's platform,
	// where the default is buffers.
	SVMEnv = "GOFFLOAD_OPENCL_SVM"
)

func library() string { return gpukind.LibraryPath(LibraryEnv, cldrv.DefaultLibrary) }

// A driverState is a loaded library and its platforms and devices, or why
// there are none.
type driverState struct {
	lib  *cldrv.Lib
	devs []*clDevice // every device of every platform, in the kind's order (orderByType)
	err  error
}

// A platform is an OpenCL platform and the context its devices share.
type platform struct {
	lib     *cldrv.Lib
	id      cldrv.Platform
	name    string
	version string
	devs    []cldrv.Device

	mu    sync.Mutex
	ctx   cldrv.Context // 0 until the first device opens
	progs map[progKey]*program
}

// A clDevice is an OpenCL device as discovery describes it.
type clDevice struct {
	pl     *platform
	id     cldrv.Device
	ord    int // in the driverState's list: N of "opencl:N"
	name   string
	typ    uint64
	vendor uint32
}

var drivers gpukind.Drivers[driverState]

// getDriver loads the library at path and lists its devices, once per
// process.
func getDriver(path string) *driverState { return drivers.Get(path, initDriver) }

func initDriver(path string) *driverState {
	lib, err := cldrv.Load(path)
	if err != nil {
		return &driverState{err: gpukind.LoadFailure(err, path, "OpenCL ICD loader", "OpenCL library")}
	}
	s := &driverState{lib: lib}
	pls, err := lib.Platforms()
	if err != nil {
		s.err = fmt.Errorf("the OpenCL library cannot list its platforms: %w", err)
		return s
	}
	if len(pls) == 0 {
		s.err = fmt.Errorf("no OpenCL platform (no driver registered in /etc/OpenCL/vendors; PoCL's is pocl-opencl-icd)")
		return s
	}
	var skipped []string
	var all []*clDevice
	for _, id := range pls {
		pl := &platform{lib: lib, id: id, progs: map[progKey]*program{}}
		pl.name, _ = lib.PlatformInfoString(id, cldrv.PlatformName)
		pl.version, _ = lib.PlatformInfoString(id, cldrv.PlatformVersion)
		ds, err := lib.Devices(id, cldrv.TypeAll)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", pl.name, err))
			continue
		}
		pl.devs = ds
		for _, d := range ds {
			cd := &clDevice{pl: pl, id: d}
			cd.name, _ = lib.DeviceInfoString(d, cldrv.DeviceName)
			cd.typ, _ = lib.DeviceInfoUint(d, cldrv.DeviceType)
			v, _ := lib.DeviceInfoUint(d, cldrv.DeviceVendorID)
			cd.vendor = uint32(v)
			all = append(all, cd)
		}
	}
	typs := make([]uint64, len(all))
	for i, cd := range all {
		typs[i] = cd.typ
	}
	for _, i := range orderByType(typs) {
		all[i].ord = len(s.devs)
		s.devs = append(s.devs, all[i])
	}
	if len(s.devs) == 0 {
		s.err = fmt.Errorf("no OpenCL device on %d platform(s)", len(pls))
		if len(skipped) > 0 {
			s.err = fmt.Errorf("%w (%s)", s.err, strings.Join(skipped, "; "))
		}
	}
	return s
}

// Device classes, in the kind's order.
const (
	classGPU = iota
	classAccelerator
	classCPU
)

// classNames are the classes' names in specs ("opencl:gpu") and in Info.
var classNames = [...]string{classGPU: "gpu", classAccelerator: "accelerator", classCPU: "cpu"}

// classOf is the class of a device of OpenCL type typ (CL_DEVICE_TYPE). It is
// a GPU, else an accelerator, else a CPU. (A CPU is CL_DEVICE_TYPE_CPU, or a
// device that says nothing more.)
func classOf(typ uint64) int {
	switch {
	case typ&cldrv.TypeGPU != 0:
		return classGPU
	case typ&cldrv.TypeAccelerator != 0:
		return classAccelerator
	}
	return classCPU
}

// orderByType returns the order the kind numbers devices of types typs in.
// typs are listed platform by platform, in the loader's order. The order is
// the indexes of the GPUs, then of the accelerators, then of the CPUs, each
// in their order in typs.
func orderByType(typs []uint64) []int {
	order := make([]int, 0, len(typs))
	for c := range classNames {
		for i, t := range typs {
			if classOf(t) == c {
				order = append(order, i)
			}
		}
	}
	return order
}

// openSpec opens the devices of "opencl" (arg "": every device), "opencl:N"
// or "opencl:gpu". accelerator and cpu work as gpu: every device of the
// class.
func openSpec(arg string) ([]plugin.Device, error) {
	ord, class := -1, -1
	if arg != "" {
		for c, name := range classNames {
			if strings.EqualFold(arg, name) {
				class = c
			}
		}
		if class < 0 {
			var err error
			if ord, err = gpukind.SpecNumber("opencl", arg, "opencl (every OpenCL device), opencl:N with N a device number from 0, or opencl:gpu, opencl:accelerator or opencl:cpu (every device of the type)"); err != nil {
				return nil, err
			}
		}
	}
	s := getDriver(library())
	if s.err != nil {
		return nil, gpukind.NoDriver(s.err, ord < 0)
	}
	if ord >= len(s.devs) {
		return nil, fmt.Errorf("opencl:%d: there is no OpenCL device %d: the platforms have %d (0 to %d)", ord, ord, len(s.devs), len(s.devs)-1)
	}
	cds := s.devs
	switch {
	case ord >= 0:
		cds = s.devs[ord : ord+1]
	case class >= 0:
		cds = nil
		var others []string
		for _, cd := range s.devs {
			if classOf(cd.typ) == class {
				cds = append(cds, cd)
			} else {
				others = append(others, fmt.Sprintf("opencl:%d (%s, %s)", cd.ord, cd.name, classNames[classOf(cd.typ)]))
			}
		}
		if len(cds) == 0 {
			return nil, fmt.Errorf("%w: no OpenCL device of type %s; the platforms have %s", plugin.ErrNoDevices, classNames[class], strings.Join(others, ", "))
		}
	}
	return openDevices(cds)
}

// cudaGPUs returns how many GPUs the cuda kind has. It is 0 if the kind is
// not in the program or the CUDA driver has none. An NVIDIA OpenCL device is
// one of those GPUs then.
var cudaGPUs = func() int {
	if _, ok := plugin.LookupKind("cuda"); !ok {
		return 0
	}
	drv, err := cudadrv.Load(gpukind.LibraryPath("GOFFLOAD_CUDA_LIBRARY", cudadrv.DefaultLibrary))
	if err != nil || drv.Init() != nil {
		return 0
	}
	n, _ := drv.DeviceGetCount()
	return n
}

// discover opens the GPUs and accelerators, less the NVIDIA devices that the
// cuda kind has. It says why there are none.
func discover() ([]plugin.Device, error) {
	s := getDriver(library())
	if s.err != nil {
		return nil, fmt.Errorf("%w: %v", plugin.ErrNoDevices, s.err)
	}
	nv := cudaGPUs() > 0
	var cds []*clDevice
	var left []string
	for _, cd := range s.devs {
		switch {
		case classOf(cd.typ) == classCPU:
			left = append(left, fmt.Sprintf("opencl:%d (%s, a CPU device: used only when GOFFLOAD_DEVICES names it)", cd.ord, cd.name))
		case nv && cd.vendor == cldrv.VendorNVIDIA:
			left = append(left, fmt.Sprintf("opencl:%d (%s, a CUDA GPU: the cuda kind has it)", cd.ord, cd.name))
		default:
			cds = append(cds, cd)
		}
	}
	if len(cds) == 0 {
		return nil, fmt.Errorf("%w: no OpenCL GPU or accelerator to use by default; left out: %s", plugin.ErrNoDevices, strings.Join(left, "; "))
	}
	return openDevices(cds)
}

func openDevices(cds []*clDevice) ([]plugin.Device, error) {
	var devs []plugin.Device
	for _, cd := range cds {
		d, err := newDevice(cd)
		if err != nil {
			for _, o := range devs {
				o.Close()
			}
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// context returns the platform's context, made at the first call.
func (pl *platform) context() (cldrv.Context, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.ctx != 0 {
		return pl.ctx, nil
	}
	c, err := pl.lib.CreateContext(pl.id, pl.devs)
	if err != nil {
		return 0, fmt.Errorf("OpenCL platform %s: cannot make a context: %w", pl.name, err)
	}
	pl.ctx = c
	return c, nil
}

// Library returns the OpenCL library the kind uses, and its devices' handles
// and contexts. They are in the kind's order: device N is "opencl:N". Else it
// returns why there is none. It is for this module's bench, whose raw
// baselines call the API directly.
func Library() (*cldrv.Lib, []RawDevice, error) {
	s := getDriver(library())
	if s.err != nil {
		return nil, nil, s.err
	}
	var out []RawDevice
	for _, cd := range s.devs {
		c, err := cd.pl.context()
		if err != nil {
			return nil, nil, err
		}
		out = append(out, RawDevice{Device: cd.id, Context: c, Name: cd.name, CPU: classOf(cd.typ) == classCPU})
	}
	return s.lib, out, nil
}

// RawDevice is an OpenCL device and its platform's context, as Library
// gives them.
type RawDevice struct {
	Device  cldrv.Device
	Context cldrv.Context
	Name    string
	CPU     bool
}
