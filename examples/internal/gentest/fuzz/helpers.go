// Package fuzz holds random Go kernels for the differential fuzz target
// of internal/kernelgen: FuzzDifferential runs them on a host device and,
// from the OpenCL C goffload-gen made of them, on PoCL, with inputs the
// fuzzer's bytes give, and compares the two. kernels.go is written by
// TestKernelsUpToDate -update from a fixed seed (random bodies: integer
// and floating-point expressions over every width, loops, branches,
// switches, indexing near the ends of slices, divisions that may be by
// zero, shifts past the width); helpers.go has the functions they call.
package fuzz

//go:generate go test -run ^TestKernelsUpToDate$ -update .
//go:generate go run github.com/goffload/offload/cmd/goffload-gen -ptx off

// f2i is x as an int64 where it fits (Go leaves other conversions to the
// implementation), -7 where it does not.
func f2i(x float64) int64 {
	if !(x > -9e18 && x < 9e18) {
		return -7
	}
	return int64(x)
}

// f2u is x as a uint64 where it fits, 7 where it does not.
func f2u(x float64) uint64 {
	if !(x >= 0 && x < 1.8e19) {
		return 7
	}
	return uint64(x)
}

// mix is a 32-bit hash step: wrapping multiplication and shifts.
func mix(a, b uint32) uint32 {
	h := a*0x9e3779b1 ^ b
	h ^= h >> 15
	return h * 0x85ebca6b
}

// pick is x[k], or -1 where k is outside x: a slice passed to a function.
func pick(x []int64, k int) int64 {
	if k < 0 || k >= len(x) {
		return -1
	}
	return x[k]
}

// at is x[k], checked in the function: a fault in a called function.
func at(x []float64, k int) float64 { return x[k] }

// steps runs Collatz steps from x, at most n: a loop with an early return.
func steps(x int64, n int) int64 {
	for i := 0; i < n; i++ {
		if x&1 == 0 {
			x /= 2
		} else {
			x = 3*x + 1
		}
		if x == 1 {
			return int64(i)
		}
	}
	return x
}

// quo is a / b: a division by zero in a called function.
func quo(a, b int32) int32 { return a / b }

// normal is x, or the smallest normal float64 where x is a positive
// subnormal: Go's math.Log and Log10 (amd64) are wrong there
// (math.Log(5e-324) is -709.09, not -744.44), the device's right.
func normal(x float64) float64 {
	if x > 0 && x < 0x1p-1022 {
		return 0x1p-1022
	}
	return x
}
