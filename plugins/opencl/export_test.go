package opencl

import (
	"time"

	"github.com/goffload/offload/plugin"
)

// OnDriver reports whether k runs its OpenCL C on d (not emulated, not
// failing).
func OnDriver(d plugin.Device, k plugin.Kernel) bool {
	kf, err := d.(*device).Kernel(k)
	return err == nil && kf.Fn != nil
}

// UsesSVM reports whether d's memory is SVM.
func UsesSVM(d plugin.Device) bool { return d.(*device).svm }

// FailFirstBuildForTests makes programs built until restore is called
// build first with GOFFLOAD_FAIL_FIRST_BUILD defined, which a test's
// source makes an #error, so that it is built again without the kind's
// options (and so without argument info), as NVIDIA's compiler made a
// program with a kernel without parameters.
func FailFirstBuildForTests() (restore func()) {
	old := firstBuildOptions
	firstBuildOptions = buildOptions + " -DGOFFLOAD_FAIL_FIRST_BUILD"
	return func() { firstBuildOptions = old }
}

// SkewTraceClock makes d's clock reference place device times dt late
// until its next refresh (a second on), as a reference whose end the host
// saw dt late does on a loaded machine.
func SkewTraceClock(d plugin.Device, dt time.Duration) {
	dev := d.(*device)
	tr := &dev.tr
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.refresh(dev)
	tr.ref = tr.ref.Add(dt)
}
