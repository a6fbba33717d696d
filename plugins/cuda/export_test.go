package cuda

import (
	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
)

// OpenWith opens GPU ord of drv (-1: every GPU) as devices, without the
// kind's driver cache; emulate makes kernels without PTX run their Go
// bodies on the host over copies of their arguments (the conformance
// suite's kernels have no PTX).
func OpenWith(drv cudadrv.Driver, ord int, emulate bool) ([]plugin.Device, error) {
	s := initWith(drv)
	if s.err != nil {
		return nil, s.err
	}
	devs, err := openDevices(s, ord)
	for _, d := range devs {
		d.(*device).Emulate = emulate
	}
	return devs, err
}

// OpenSpec is the kind's Open.
var OpenSpec = openSpec

// Library is the driver library the kind loads.
var Library = library

// Pack returns the bytes of k's parameters packed for args, and each
// parameter's offset in them.
func Pack(k plugin.Kernel, args []plugin.Arg) ([]byte, []int, error) {
	p, err := pack(k, args, nil)
	if err != nil {
		return nil, nil, err
	}
	return p.bytes(), p.offs, nil
}

// Layout is paramLayout.
var Layout = paramLayout

// Grid is a launch's grid and block.
var Grid = grid

// ChunkSize is the staging buffers' size.
const ChunkSize = chunkSize
