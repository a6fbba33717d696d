//go:build !goffload_nocuda

package offload

// The CUDA device kind: NVIDIA GPUs, through the driver that the kind loads
// at run time. GOFFLOAD_DEVICES=cuda names it; when GOFFLOAD_DEVICES is
// unset, it is found first. The driver is loaded with purego, which makes a
// CGO_ENABLED=0 build dynamically linked against the C library.
// A program built with -tags goffload_nocuda leaves the kind out and links
// as before.
import _ "github.com/goffload/offload/plugins/cuda"
