//go:build !goffload_noopencl

package offload

// The OpenCL device kind: OpenCL devices of any vendor, through the ICD
// loader (libOpenCL.so.1) that the kind loads at run time.
// GOFFLOAD_DEVICES=opencl names them, numbered GPUs first, then
// accelerators, then CPUs; opencl:gpu and opencl:cpu name one type.
// When GOFFLOAD_DEVICES is unset, GPUs and accelerators are found after the
// CUDA GPUs; CPU devices are used only when named.
// Like the cuda kind, it is loaded with purego. A program built with
// -tags goffload_noopencl leaves the kind out. See docs/opencl.md.
import _ "github.com/goffload/offload/plugins/opencl"
