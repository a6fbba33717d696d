package opencl

import "github.com/goffload/offload/plugin"

// OnDriver reports whether k runs its OpenCL C on d (not emulated, not
// failing).
func OnDriver(d plugin.Device, k plugin.Kernel) bool {
	kf, err := d.(*device).kernel(k)
	return err == nil && kf.k != 0
}

// UsesSVM reports whether d's memory is SVM.
func UsesSVM(d plugin.Device) bool { return d.(*device).svm }
