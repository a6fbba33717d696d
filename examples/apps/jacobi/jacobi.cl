// jacobi.cl is the OpenCL C of Step and StepRows (jacobi.go), for OpenCL
// devices: one work-item per interior cell, as jacobi.cu has one thread
// per cell (jacobi_step: OpenCL C has a builtin step).
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

static void cell(global double *next, global const double *cur, long cols, long lo, long count)
{
	long w = cols - 2; // the interior cells of a row
	long i = get_global_id(0);
	if (w > 0 && i < count * w) {
		long r = lo + i / w, c = 1 + i % w;
		global const double *row = cur + r * cols, *up = row - cols, *down = row + cols;
		next[r * cols + c] = 0.25 * (up[c] + down[c] + row[c - 1] + row[c + 1]);
	}
}

kernel void jacobi_step(global double *next, global const double *cur, long cols, long rows)
{
	cell(next, cur, cols, 1, rows);
}

kernel void steprows(global double *next, global const double *cur, long cols, long lo, long hi)
{
	cell(next, cur, cols, lo, hi - lo);
}
