package opencl

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// buildOptions are the options every program is built with. The argument info
// is what a launch's parameters are checked against.
const buildOptions = "-cl-kernel-arg-info"

// firstBuildOptions are the options a program is built with first. A program
// that fails with them is built again without (see program). Tests change it
// (FailFirstBuildForTests).
var firstBuildOptions = buildOptions

// device is one OpenCL device of the kind.
type device struct {
	cd  *clDevice
	lib *cldrv.Lib
	pl  *platform
	ctx cldrv.Context

	svm      bool  // memory is SVM (else buffers)
	align    int64 // CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: a sub-buffer's origin
	maxAlloc int64
	maxWG    int
	maxItems [3]int
	props    bool // OpenCL 2.0 or later: queues made with properties

	// Device is the state (label, closed, lost), the events and the
	// loaded image (under Mu).
	gpukind.Device[cldrv.Event, *kernelFn]
	mem memory
	tr  tracing
	// globals are where the declare target variables are (gocode.go).
	globals gpukind.Globals

	// stage makes submits copy their host memory when they are issued and
	// write from the copy, as NVIDIA's driver does. It is for the tests only
	// (StageWritesForTests).
	stage bool
}

// kernelFn is a kernel object as the device launches it.
type kernelFn struct {
	k     cldrv.Kernel
	entry string
	mu    sync.Mutex // held while its arguments are set and it is enqueued
	wg    int        // CL_KERNEL_WORK_GROUP_SIZE
	ptrs  []bool     // by parameter: passed as a pointer
	// gen is generated code's sites, variables and device number (nil:
	// hand-written code; gocode.go).
	gen *gpukind.GenCode
}

// emulation is UseEmulationForTests's switch.
var emulation atomic.Bool

// UseEmulationForTests makes the devices opened until restore is called run
// the Go bodies of kernels without OpenCL C on the host. They run over copies
// of their arguments' device memory, in their queues' order, instead of
// failing. It is for this module's tests. They run the conformance suite and
// the runtime's semantics with kernels written in Go only, on the OpenCL
// driver's memory, queues and events. A program has no use for it.
func UseEmulationForTests() (restore func()) {
	old := emulation.Swap(true)
	return func() { emulation.Store(old) }
}

// useSVM says whether a device's memory is SVM. It is where the device has
// coarse-grained SVM buffers (caps), unless env (GOFFLOAD_OPENCL_SVM) is 0.
// On NVIDIA's platform it is only where env is 1. NVIDIA's OpenCL 3.0 driver
// reports SVM. But its clSVMAlloc failed small allocations made by several
// goroutines at once as out of memory. That was on an H100 with 80 GB free
// (driver 580.159.04, the conformance suite's Concurrency). Buffers passed
// the whole suite there, so they are the default there.
func useSVM(caps uint64, platform, env string) (bool, error) {
	var on bool
	switch strings.TrimSpace(env) {
	case "":
		on = !strings.Contains(platform, "NVIDIA")
	case "0":
		on = false
	case "1":
		on = true
	default:
		return false, fmt.Errorf("%s=%q: want 0 (buffers) or 1 (shared virtual memory where the device has it), or unset", SVMEnv, env)
	}
	return on && caps&cldrv.SVMCoarseGrainBuffer != 0, nil
}

// staging is StageWritesForTests's switch.
var staging atomic.Bool

// StageWritesForTests makes the devices opened until restore is called read a
// submit's host memory when the submit is issued. That is as NVIDIA's OpenCL
// does, not when the command queue reaches the write. It is for this module's
// tests. They check on any driver that the kind keeps the order of host
// memory on such drivers. A program has no use for it.
func StageWritesForTests() (restore func()) {
	old := staging.Swap(true)
	return func() { staging.Store(old) }
}

// newDevice opens an OpenCL device.
func newDevice(cd *clDevice) (*device, error) {
	lib := cd.pl.lib
	ctx, err := cd.pl.context()
	if err != nil {
		return nil, err
	}
	u := func(param uint32) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = lib.DeviceInfoUint(cd.id, param)
		return v
	}
	cus, mem, maxAlloc := u(cldrv.DeviceMaxComputeUnits), u(cldrv.DeviceGlobalMemSize), u(cldrv.DeviceMaxMemAllocSize)
	alignBits, maxWG := u(cldrv.DeviceMemBaseAddrAlign), u(cldrv.DeviceMaxWorkGroupSize)
	if err != nil {
		return nil, fmt.Errorf("OpenCL device %d (%s): %w", cd.ord, cd.name, err)
	}
	items, _ := lib.DeviceInfoSizes(cd.id, cldrv.DeviceMaxWorkItemSizes)
	version, _ := lib.DeviceInfoString(cd.id, cldrv.DeviceVersion)
	driver, _ := lib.DeviceInfoString(cd.id, cldrv.DriverVersion)
	var svmCaps uint64
	major := openCLMajor(version)
	if major >= 2 && lib.HasSVM() {
		svmCaps, _ = lib.DeviceInfoUint(cd.id, cldrv.DeviceSVMCapabilities)
	}
	svm, err := useSVM(svmCaps, cd.pl.name, os.Getenv(SVMEnv))
	if err != nil {
		return nil, fmt.Errorf("OpenCL device %d (%s): %w", cd.ord, cd.name, err)
	}
	host, _ := os.Hostname()
	typ := [...]string{classGPU: "GPU", classAccelerator: "accelerator", classCPU: "CPU"}[classOf(cd.typ)]
	d := &device{
		cd: cd, lib: lib, pl: cd.pl, ctx: ctx,
		svm:      svm,
		align:    int64(max(alignBits/8, 1)),
		maxAlloc: int64(maxAlloc),
		maxWG:    int(max(maxWG, 1)),
		maxItems: [3]int{int(max(maxWG, 1)), int(max(maxWG, 1)), int(max(maxWG, 1))},
		props:    major >= 2,
		stage:    staging.Load(),
	}
	d.Desc = plugin.Info{
		Kind: "opencl",
		Name: fmt.Sprintf("%s (%s, OpenCL device %d: %s on %s, driver %s, %d compute units)", cd.name, typ, cd.ord,
			strings.TrimSpace(version), cd.pl.name, driver, cus),
		Cores:  int(max(cus, 1)),
		Memory: int64(mem),
		Arch:   "opencl-" + strings.ToLower(typ),
		Host:   host,
		PID:    os.Getpid(),
	}
	d.Emulate, d.Stop = emulation.Load(), plugin.NewStopSignal()
	for i := range min(len(items), 3) {
		d.maxItems[i] = int(max(items[i], 1))
	}
	d.Init(&d.mem, (*events)(d), d.pl) // one context: barriers wait across its devices
	d.St.SetLabel(fmt.Sprintf("opencl device (OpenCL device %d)", cd.ord))
	d.mem.init(d)
	return d, nil
}

// openCLMajor reads the major version of "OpenCL 3.0 …".
func openCLMajor(v string) int {
	var maj, min int
	fmt.Sscanf(v, "OpenCL %d.%d", &maj, &min)
	return maj
}

func (d *device) label() string { return d.St.Label() }

func (d *device) alive() error { return d.St.Alive() }

// CancelKernels closes the Done channel of the emulated Go bodies' contexts
// (plugin.Canceler). OpenCL has no way to stop a kernel that runs: OpenCL C
// kernels run to their end.
func (d *device) CancelKernels() { d.Stop.Stop() }

// wrap turns a driver error of an enqueue into the plugin's.
func (d *device) wrap(err error) error {
	if err == nil {
		return nil
	}
	switch cldrv.Code(err) {
	case cldrv.MemObjectAllocationFailure, cldrv.OutOfHostMemory, cldrv.InvalidBufferSize:
		return fmt.Errorf("%w: %w", plugin.ErrOutOfMemory, err)
	case cldrv.OutOfResources, cldrv.InvalidCommandQueue, cldrv.InvalidContext:
		return d.lose(err)
	case cldrv.InvalidKernelArgs, cldrv.InvalidWorkGroupSize, cldrv.InvalidWorkItemSize, cldrv.InvalidGlobalWorkSize,
		cldrv.InvalidArgValue, cldrv.InvalidArgSize, cldrv.InvalidKernel:
		return fmt.Errorf("%w: %w", plugin.ErrBadKernel, err)
	}
	return err
}

// lose marks the device lost with err, a failure of work on the device. On a
// GPU driver the context is unusable after one.
func (d *device) lose(err error) error {
	return d.St.Lose(fmt.Errorf("%s: %w: %w (the OpenCL device failed work it ran: the device is unusable until the program restarts)", d.label(), plugin.ErrDeviceLost, err))
}

// A program is a source built for one OpenCL device, kept for the process.
type program struct {
	once    sync.Once
	pr      cldrv.Program
	err     error
	entries []string
	opts    string // what it was built with

	sizesOnce sync.Once
	sizes     map[string]int // typeSizes'
}

type progKey struct {
	dev  cldrv.Device
	src  string
	opts string // firstBuildOptions
}

// program returns src built for the device. It is built once per OpenCL
// device in the process, as PoCL's builds take seconds.
func (d *device) program(src []byte, generated bool) *program {
	pl := d.pl
	opts := firstBuildOptions
	if generated {
		opts += genBuildOptions
	}
	key := progKey{d.cd.id, string(src), opts}
	pl.mu.Lock()
	p, ok := pl.progs[key]
	if !ok {
		p = &program{}
		pl.progs[key] = p
	}
	pl.mu.Unlock()
	p.once.Do(func() {
		pr, err := d.lib.CreateProgram(d.ctx, src)
		if err != nil {
			p.err = err
			return
		}
		if err := d.lib.BuildProgram(pr, []cldrv.Device{d.cd.id}, opts); err != nil {
			log := strings.TrimSpace(d.lib.BuildLog(pr, d.cd.id))
			d.lib.ReleaseProgram(pr)
			// NVIDIA's compiler (driver 580) failed a program with a kernel
			// without parameters in ptxas with -cl-kernel-arg-info. It built
			// it without. The kind checks such a program's arguments by their
			// count and sizes only (checkEntry).
			if pr, err2 := d.lib.CreateProgram(d.ctx, src); err2 == nil {
				if d.lib.BuildProgram(pr, []cldrv.Device{d.cd.id}, "") == nil {
					p.pr = pr
					p.opts = ""
					p.entries, _ = d.lib.KernelNames(pr)
					return
				}
				d.lib.ReleaseProgram(pr)
			}
			p.err = fmt.Errorf("%w; build log:\n%s", err, log)
			return
		}
		p.pr, p.opts = pr, opts
		p.entries, _ = d.lib.KernelNames(pr)
	})
	return p
}

// Load builds the OpenCL C of the image's kernels for the device and makes
// each kernel's entry. It checks the entry's parameters against the kernel's
// Go parameters. Some kernels fail when they are launched, not here. They are
// those without OpenCL C, whose source does not build, or whose entry does
// not take their parameters.
func (d *device) Load(img *plugin.Image, num int) error {
	return d.Device.Load(img, num, fmt.Sprintf("opencl device %d (OpenCL device %d)", num, d.cd.ord), openCLFormat, d.loadKernel)
}

// openCLFormat is the opencl kind's device code.
var openCLFormat = gpukind.Format{Key: "opencl", Name: "OpenCL C", Device: "an OpenCL device", Method: "offload.Kernel.OpenCL"}

// loadKernel makes the kernel object of k's code; under d.Mu.
func (d *device) loadKernel(k plugin.Kernel, code plugin.DeviceCode) gpukind.Kernel[*kernelFn] {
	p := d.program(code.Image, code.Generated)
	if p.err != nil {
		return gpukind.Kernel[*kernelFn]{Err: fmt.Errorf("%s: %w: kernel %q: its OpenCL C does not build for %s: %w", d.label(), plugin.ErrBadKernel, k.Name(), d.cd.name, p.err)}
	}
	ck, err := d.lib.CreateKernel(p.pr, code.Entry)
	if err != nil {
		has := "has no kernels"
		if len(p.entries) > 0 {
			has = "has kernels " + strings.Join(p.entries, ", ")
		}
		return gpukind.Kernel[*kernelFn]{Err: fmt.Errorf("%s: %w: kernel %q: entry %q of its OpenCL C: %w (the program %s)", d.label(), plugin.ErrBadKernel, k.Name(), code.Entry, err, has)}
	}
	kf := &kernelFn{k: ck, entry: code.Entry}
	if code.Generated {
		if kf.gen, err = gpukind.NewGenCode(code, d.Kernels.Num, "generated OpenCL C"); err != nil {
			d.lib.ReleaseKernel(ck)
			return gpukind.Kernel[*kernelFn]{Err: fmt.Errorf("%s: %w: kernel %q: %w", d.label(), plugin.ErrBadKernel, k.Name(), err)}
		}
	}
	if err := d.checkEntry(k, kf, d.typeSizes(p, code.Image)); err != nil {
		d.lib.ReleaseKernel(ck)
		return gpukind.Kernel[*kernelFn]{Err: fmt.Errorf("%s: %w: kernel %q: %w", d.label(), plugin.ErrBadKernel, k.Name(), err)}
	}
	kf.wg, _ = d.lib.KernelWorkGroupSize(ck, d.cd.id)
	return gpukind.Kernel[*kernelFn]{Fn: kf}
}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	cq, err := d.lib.CreateQueue(d.ctx, d.cd.id, true, d.props)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot create a queue: %w", d.label(), d.wrap(err))
	}
	q := &queue{d: d, cq: cq, own: cq}
	q.Init(&d.Device, (*issuer)(q), q, &d.tr.Tracer)
	return q, nil
}

// Close releases the device's memory, kernels and events. The platform's
// context and its built programs stay for the process.
func (d *device) Close() error {
	if !d.St.Close() {
		return nil
	}
	d.Mu.Lock()
	kfns, pool := d.Kernels.Close()
	d.Mu.Unlock()
	d.Stop.Stop()
	if pool != nil {
		pool.Close()
	}
	var errs []error
	for _, kf := range kfns {
		errs = append(errs, d.lib.ReleaseKernel(kf.k))
	}
	for _, cl := range d.Events.Close() {
		d.lib.ReleaseEvent(cl)
	}
	errs = append(errs, d.tr.close(d), d.mem.close(d))
	if err := errors.Join(errs...); err != nil && d.Lost() == nil {
		return fmt.Errorf("%s: close: %w", d.label(), err)
	}
	return nil
}
