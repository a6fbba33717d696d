package opencl_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goffload/offload/plugin"
)

const msgCL = `
typedef struct { float a, b, c; } S3;
kernel void m_ptr(global float *x) { }
kernel void m_val(float x) { }
kernel void m_long(long x) { }
kernel void m_int(int x) { }
kernel void m_intp(global int *x) { }
kernel void m_f4(float4 x) { }
kernel void m_f4p(global float4 *x) { }
kernel void m_s3(S3 x) { }
kernel void m_s3p(global S3 *x) { }
kernel void m_uchar(uchar x) { }
kernel void m_local(local float *x) { }
kernel void m_two(global float *x, long n) { }
`

type s3wide struct{ A, B, C, D float32 }

var msgKernels = []plugin.Kernel{
	register("msg.ptrval", func(x float32) {}, msgCL, "m_ptr"),
	register("msg.ptrdouble", func(x []float64) {}, msgCL, "m_ptr"),
	register("msg.ptrint", func(x []int32) {}, msgCL, "m_ptr"),
	register("msg.valslice", func(x []float32) {}, msgCL, "m_val"),
	register("msg.valint", func(x int32) {}, msgCL, "m_val"),
	register("msg.long", func(x int32) {}, msgCL, "m_long"),
	register("msg.int", func(x int) {}, msgCL, "m_int"),
	register("msg.intp", func(x []float32) {}, msgCL, "m_intp"),
	register("msg.f4", func(x float32) {}, msgCL, "m_f4"),
	register("msg.f4p", func(x []float32) {}, msgCL, "m_f4p"),
	register("msg.s3", func(x s3wide) {}, msgCL, "m_s3"),
	register("msg.s3p", func(x []s3wide) {}, msgCL, "m_s3p"),
	register("msg.uchar", func(x int32) {}, msgCL, "m_uchar"),
	register("msg.local", func(x []float32) {}, msgCL, "m_local"),
	register("msg.count", func(x []float32) {}, msgCL, "m_two"),
	register("msg.count2", func(x []float32, n int, m int) {}, msgCL, "m_two"),
	register("msg.empty", func(x []float32, e struct{}) {}, msgCL, "m_two"),
}

// TestCheckMessages: what the check of an entry's parameters says, for
// each kind of mismatch, read as a user would (issue 47 item 11): the
// kernel, the entry, the parameter and both sides, and what to change on
// either.
func TestCheckMessages(t *testing.T) {
	d := loaded(t)
	want := map[string]string{
		"msg.ptrval":    `OpenCL C entry m_ptr parameter 0 is float*, a pointer; the Go parameter 0 (float32) is a value: declare it float, or take []float32 in Go`,
		"msg.ptrdouble": `OpenCL C entry m_ptr parameter 0 is float*, whose elements are 4 bytes; the Go parameter 0 ([]float64) has elements of 8 bytes: declare it global double *, or take []float32 in Go`,
		"msg.ptrint":    `OpenCL C entry m_ptr parameter 0 is float*, whose elements are floats; the Go parameter 0 ([]int32) has elements that are integers: declare it global int *, or take []float32 in Go`,
		"msg.valslice":  `OpenCL C entry m_val parameter 0 is float, a value; the Go parameter 0 ([]float32) is a slice, which the kind passes as a global pointer: declare it global float *, or take float32 in Go`,
		"msg.valint":    `OpenCL C entry m_val parameter 0 is float, a float; the Go parameter 0 (int32) is an integer: declare it int, or take float32 in Go`,
		"msg.long":      `OpenCL C entry m_long parameter 0 is long, 8 bytes; the Go parameter 0 (int32) is 4 bytes: declare it int, or take int or int64 in Go`,
		"msg.int":       `OpenCL C entry m_int parameter 0 is int, 4 bytes; the Go parameter 0 (int) is 8 bytes: declare it long, or take int32 in Go`,
		"msg.intp":      `OpenCL C entry m_intp parameter 0 is int*, whose elements are integers; the Go parameter 0 ([]float32) has elements that are floats: declare it global float *, or take []int32 in Go`,
		"msg.f4":        `OpenCL C entry m_f4 parameter 0 is float4, 16 bytes; the Go parameter 0 (float32) is 4 bytes: declare it float, or take [4]float32 in Go`,
		"msg.f4p":       `OpenCL C entry m_f4p parameter 0 is float4*, whose elements are 16 bytes; the Go parameter 0 ([]float32) has elements of 4 bytes: declare it global float *, or take [][4]float32 in Go`,
		"msg.s3":        `OpenCL C entry m_s3 parameter 0 is S3, 12 bytes; the Go parameter 0 (opencl_test.s3wide) is 16 bytes: make the Go type match S3: the same size, and a struct's fields in the same order`,
		"msg.s3p":       `OpenCL C entry m_s3p parameter 0 is S3*, whose elements are 12 bytes (sizeof(S3)); the Go parameter 0 ([]opencl_test.s3wide) has elements of 16 bytes: make the Go type match S3: the same size, and a struct's fields in the same order`,
		"msg.uchar":     `OpenCL C entry m_uchar parameter 0 is uchar, 1 byte; the Go parameter 0 (int32) is 4 bytes: declare it int, or take uint8 or bool in Go`,
		"msg.local":     `OpenCL C entry m_local parameter 0 is float*, a local pointer: the kind passes only global pointers and values`,
		"msg.count":     `OpenCL C entry m_two has 2 parameters (float*, long); the Go kernel has 1 parameter ([]float32): OpenCL C parameter 1 (long) has no Go parameter`,
		"msg.count2":    `OpenCL C entry m_two has 2 parameters (float*, long); the Go kernel has 3 parameters ([]float32, int, int): the Go parameter 2 (int) has none in the entry`,
		"msg.empty":     `the Go parameter 1 (struct {}) has size 0, and an OpenCL C entry has no parameter of size 0: leave it out`,
	}
	for _, k := range msgKernels {
		err := d.(plugin.KernelChecker).CanLaunch(k)
		w := fmt.Sprintf("opencl device 0 (OpenCL device 0): invalid kernel launch: kernel %q: %s", k.Name(), want[k.Name()])
		if !errors.Is(err, plugin.ErrBadKernel) || err.Error() != w {
			t.Errorf("%s:\n\t%v\nwant\n\t%s", k.Name(), err, w)
		}
	}
}
