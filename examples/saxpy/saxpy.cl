// saxpy.cl is the OpenCL C of the saxpy kernel in main.go, for OpenCL
// devices (GOFFLOAD_DEVICES=opencl): y[i] += a*x[i] for i < n, one
// work-item per element. Its parameters are the Go kernel's after the Ctx,
// in order: Go's int is OpenCL C's long, a slice a global pointer. The
// device's driver builds it when the program starts.
#pragma OPENCL FP_CONTRACT OFF

kernel void saxpy(long n, float a, global const float *x, global float *y)
{
	long i = get_global_id(0);
	if (i < n)
		y[i] = y[i] + a * x[i];
}
