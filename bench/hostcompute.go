package main

import (
	"encoding/binary"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The mpi suite's mpi.host_compute_idle_device (issue 34): the host rank's
// own Go code, one goroutine of pure CPU work per P, while the job's MPI
// devices sit idle after a first launch, against the same loop in a child
// process of this executable outside MPI (role "compute", started with the
// launcher's environment removed), timed by each process itself and in
// alternating rounds. An idle MPI device must cost the host's Go code
// nothing measurable: the goal is a ratio of at most 1.05.

var computeSink atomic.Uint64

// computeLoop runs one goroutine per P, each iters rounds of arithmetic
// with nothing shared, and returns how long they took together.
func computeLoop(iters int) time.Duration {
	n := runtime.GOMAXPROCS(0)
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(g + 1)
			for range iters {
				x = x*6364136223846793005 + 1442695040888963407
			}
			computeSink.Add(x)
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

// serveCompute is the child's side: each 8-byte little-endian iteration
// count read from in is answered with the loop's time in nanoseconds, until
// end of stream.
func serveCompute(in io.Reader, out io.Writer) error {
	var b [8]byte
	for {
		if _, err := io.ReadFull(in, b[:]); err != nil {
			return endOfStream(err)
		}
		d := computeLoop(int(binary.LittleEndian.Uint64(b[:])))
		binary.LittleEndian.PutUint64(b[:], uint64(d.Nanoseconds()))
		if _, err := out.Write(b[:]); err != nil {
			return err
		}
	}
}
