// Package handptx holds the CUDA C and PTX that the examples' kernels had
// before goffload-gen made their PTX from the Go bodies (saxpy, the
// pipeline's step, Jacobi's step and steprows, Cholesky's tile kernels):
// the hand-written baselines of a generated-against-hand row on a GPU, as
// bench/cholesky.cl is on OpenCL devices. Each .cu file's comment says
// which Go kernel's parameters its entries take (the hand-written ones
// take no hidden parameters).
package handptx

//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -ffp-contract=off -S saxpy.cu -o saxpy.ptx
//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -ffp-contract=off -S step.cu -o step.ptx
//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -ffp-contract=off -S jacobi.cu -o jacobi.ptx
//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -ffp-contract=off -S cholesky.cu -o cholesky.ptx

import _ "embed"

// The PTX images: Saxpy's entry saxpy; Step's step (examples/pipeline);
// Jacobi's step and steprows; Cholesky's potrf, trsm, syrk and gemm.
var (
	//go:embed saxpy.ptx
	Saxpy []byte
	//go:embed step.ptx
	Step []byte
	//go:embed jacobi.ptx
	Jacobi []byte
	//go:embed cholesky.ptx
	Cholesky []byte
)
