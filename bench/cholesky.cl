// cholesky.cl is the OpenCL C of the tile kernels (cholesky.go), for
// OpenCL devices: each computes every element with the Go body's
// operations in its order, without contractions into fused
// multiply-adds, so that a device's tiles are bit for bit the host's.
// potrf runs on the first work-group, whose work-items share each column
// between barriers.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

kernel void potrf(global double *a, long b)
{
	if (get_group_id(0) != 0)
		return; // the whole group returns: its barriers are not reached
	long t = get_local_id(0), nt = get_local_size(0);
	for (long j = 0; j < b; j++) {
		if (t == 0) {
			double s = a[j * b + j];
			for (long k = 0; k < j; k++)
				s -= a[j * b + k] * a[j * b + k];
			a[j * b + j] = sqrt(s);
		}
		barrier(CLK_GLOBAL_MEM_FENCE); // the pivot is written
		double d = a[j * b + j];
		for (long i = j + 1 + t; i < b; i += nt) {
			double x = a[i * b + j];
			for (long k = 0; k < j; k++)
				x -= a[i * b + k] * a[j * b + k];
			a[i * b + j] = x / d;
		}
		barrier(CLK_GLOBAL_MEM_FENCE); // column j is written before column j+1 reads it
	}
}

kernel void trsm(global const double *l, global double *a, long b)
{
	long r = get_global_id(0);
	if (r < b) {
		global double *x = a + r * b;
		for (long j = 0; j < b; j++) {
			double t = x[j];
			for (long k = 0; k < j; k++)
				t -= x[k] * l[j * b + k];
			x[j] = t / l[j * b + j];
		}
	}
}

kernel void syrk(global const double *a, global double *c, long b)
{
	long e = get_global_id(0);
	if (e < b * b) {
		long i = e / b, j = e % b;
		if (j <= i) {
			double t = 0;
			for (long k = 0; k < b; k++)
				t += a[i * b + k] * a[j * b + k];
			c[i * b + j] -= t;
		}
	}
}

kernel void gemm(global const double *a, global const double *bt, global double *c, long b)
{
	long e = get_global_id(0);
	if (e < b * b) {
		long i = e / b, j = e % b;
		double t = 0;
		for (long k = 0; k < b; k++)
			t += a[i * b + k] * bt[j * b + k];
		c[i * b + j] -= t;
	}
}
