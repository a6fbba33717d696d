//go:build !goffload_noopencl

package offload

// The OpenCL device kind: OpenCL devices of any vendor through the ICD
// loader (libOpenCL.so.1) that the kind loads at run time
// (GOFFLOAD_DEVICES=opencl, numbered GPUs first, then accelerators, then
// CPUs; opencl:gpu, opencl:cpu for one type; GPUs and accelerators found
// after the CUDA GPUs when GOFFLOAD_DEVICES is unset, CPU devices only
// when named). Like
// the cuda kind it is loaded with purego; a program built with -tags
// goffload_noopencl leaves the kind out. See docs/opencl.md.
import _ "github.com/goffload/offload/plugins/opencl"
