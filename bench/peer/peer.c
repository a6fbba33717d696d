// peer.c: LLVM's offloading runtime (libomptarget, host plugin) on the
// workloads of goffload's bench -suite peer. bench builds it with clang-22
// -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu and runs it with
// OMP_TARGET_OFFLOAD=MANDATORY:
//
//	peer WORKLOAD N
//
// runs N operations of WORKLOAD after a warm-up and prints the time per
// operation in nanoseconds. It exits 3 if a target region runs on the
// initial device (no offloading), 4 if a result is wrong.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void check_offloaded(void) {
	int initial = 1;
#pragma omp target map(from : initial)
	{ initial = omp_is_initial_device(); }
	if (initial) {
		fprintf(stderr, "peer: the target region ran on the initial device: no offloading\n");
		exit(3);
	}
}

static void fail(const char *what) {
	fprintf(stderr, "peer: %s\n", what);
	exit(4);
}

#define SIZE64MIB (64L << 20)

static double empty_region(long n) {
	for (int i = 0; i < 100; i++) {
#pragma omp target
		{}
	}
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
#pragma omp target
		{}
	}
	return now_ns() - t0;
}

static double map_tofrom(long n) {
	char *buf = malloc(SIZE64MIB);
	memset(buf, 1, SIZE64MIB);
#pragma omp target map(tofrom : buf[0:SIZE64MIB])
	{ buf[0]++; }
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
#pragma omp target map(tofrom : buf[0:SIZE64MIB])
		{ buf[0]++; }
	}
	double t = now_ns() - t0;
	if (buf[0] != (char)(2 + n)) fail("map_tofrom_64MiB: the data did not make the round trip");
	free(buf);
	return t;
}

static double present_region(long n) {
	char *buf = malloc(SIZE64MIB);
	memset(buf, 7, SIZE64MIB);
#pragma omp target enter data map(to : buf[0:SIZE64MIB])
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
#pragma omp target map(tofrom : buf[0:SIZE64MIB])
		{ buf[0]++; }
	}
	double t = now_ns() - t0;
#pragma omp target exit data map(from : buf[0:SIZE64MIB])
	if (buf[0] != (char)(7 + n)) fail("present_region_64MiB: wrong count of regions");
	free(buf);
	return t;
}

static double saxpy(long n, long m) {
	float *x = malloc(m * sizeof(float)), *y = malloc(m * sizeof(float));
	for (long i = 0; i < m; i++) x[i] = i % 1000, y[i] = 0;
	const float a = 2.5f;
	double t0 = 0;
	for (long r = -1; r < n; r++) { // the first round warms up
		if (r == 0) t0 = now_ns();
#pragma omp target teams distribute parallel for map(to : x[0:m]) map(tofrom : y[0:m])
		for (long i = 0; i < m; i++) y[i] += a * x[i];
	}
	double t = now_ns() - t0;
	for (long i = 0; i < m; i += m / 7 + 1)
		if (y[i] != (n + 1) * a * (float)(i % 1000)) fail("saxpy: wrong result");
	free(x), free(y);
	return t;
}

// stencil: one run is 100 Jacobi iterations on a 512² grid inside a target
// data region, with the result copied back.
static double stencil(long n) {
	const long s = 512, it = 100;
	double *u = malloc(s * s * sizeof(double)), *v = malloc(s * s * sizeof(double));
	double t = 0;
	for (long r = -1; r < n; r++) {
		for (long i = 0; i < s * s; i++) u[i] = v[i] = (i < s) ? 100 : (i % s == 0 ? 50 : 0);
#pragma omp target data map(to : u[0:s * s], v[0:s * s])
		{
			double t0 = now_ns();
			for (long k = 0; k < it; k++) {
				double *cur = (k % 2) ? v : u, *next = (k % 2) ? u : v;
#pragma omp target teams distribute parallel for
				for (long i = 1; i < s - 1; i++)
					for (long j = 1; j < s - 1; j++)
						next[i * s + j] = 0.25 * (cur[(i - 1) * s + j] + cur[(i + 1) * s + j] + cur[i * s + j - 1] + cur[i * s + j + 1]);
			}
#pragma omp target update from(u[0:s * s])
			if (r >= 0) t += now_ns() - t0;
		}
	}
	if (!(u[s + 1] > 0)) fail("stencil: no heat moved");
	free(u), free(v);
	return t;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: peer WORKLOAD N\n");
		return 2;
	}
	const char *w = argv[1];
	long n = atol(argv[2]);
	if (n < 1) n = 1;
	check_offloaded();
	double t;
	if (!strcmp(w, "empty_region")) t = empty_region(n);
	else if (!strcmp(w, "map_tofrom_64MiB")) t = map_tofrom(n);
	else if (!strcmp(w, "present_region_64MiB")) t = present_region(n);
	else if (!strcmp(w, "saxpy_1Mi")) t = saxpy(n, 1L << 20);
	else if (!strcmp(w, "saxpy_64Mi")) t = saxpy(n, 64L << 20);
	else if (!strcmp(w, "stencil_512")) t = stencil(n);
	else {
		fprintf(stderr, "peer: unknown workload %s\n", w);
		return 2;
	}
	printf("%.1f\n", t / n);
	return 0;
}
