package remote_test

import "unsafe"

func f64bytes(x []float64) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*8)
}
