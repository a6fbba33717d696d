// step.cl is the OpenCL C of the step kernel in main.go, for OpenCL
// devices (heat_step: OpenCL C has a builtin step): one explicit step of the heat equation on the interior points
// 1..n, one work-item per point.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define ALPHA 0.25 // main.go's alpha

kernel void heat_step(long n, global double *next, global const double *cur)
{
	long i = get_global_id(0) + 1;
	if (i <= n)
		next[i] = cur[i] + ALPHA * (cur[i - 1] - 2 * cur[i] + cur[i + 1]);
}
