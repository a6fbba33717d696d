package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/goffload/offload"
)

// TestTBRecorded runs every pattern as the recorded kinds do, on host:2
// and local:2 at widths 2 and 4: recorded once, replayed with other
// iterations, each replay's outputs checked and every task's inputs.
func TestTBRecorded(t *testing.T) {
	for _, devices := range []string{"host:2", "local:2"} {
		t.Run(devices, func(t *testing.T) {
			if err := offload.Start(offload.WithDevices(devices), offload.WithOffload("MANDATORY")); err != nil {
				t.Fatal(err)
			}
			defer offload.Stop()
			devs := []offload.Device{offload.On(0), offload.On(1)}
			for _, s := range tbTestPatterns {
				for _, w := range []int{2, 4} {
					recs := map[string]*tbRecorded{}
					for _, iters := range []int64{2, 8, 4} {
						g := tbGraph{Pattern: tbForWidth(mustPattern(t, s), w), Width: w, Steps: 5, Kernel: tbComputeBound, Iters: iters, Scratch: 8, Samples: 2}
						if _, err := runTBRecorded(recs, g, devs); err != nil {
							t.Errorf("%s width %d, %d iterations: %v", s, w, iters, err)
						}
					}
					if len(recs) != 1 {
						t.Errorf("%s width %d: %d graphs recorded, want 1", s, w, len(recs))
					}
					for _, r := range recs {
						if err := r.st.unmap(); err != nil {
							t.Error(err)
						}
					}
				}
			}
		})
	}
}

// BenchmarkTBRecorded replays trivial and stencil_1d at width 2 on
// host:2, 1000 timesteps of 64 iterations: the time per task.
func BenchmarkTBRecorded(b *testing.B) {
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithOffload("MANDATORY")); err != nil {
		b.Fatal(err)
	}
	defer offload.Stop()
	devs := []offload.Device{offload.On(0), offload.On(1)}
	for _, s := range []string{"trivial", "stencil_1d"} {
		b.Run(s, func(b *testing.B) {
			recs := map[string]*tbRecorded{}
			g := tbGraph{Pattern: tbForWidth(mustPattern(b, s), 2), Width: 2, Steps: 1000, Kernel: tbComputeBound, Iters: 64}
			var wall float64
			for range b.N {
				d, err := runTBRecorded(recs, g, devs)
				if err != nil {
					b.Fatal(err)
				}
				wall += float64(d.Nanoseconds())
			}
			b.ReportMetric(wall/float64(b.N*g.Steps*g.Width), "ns/task")
		})
	}
}

// BenchmarkTBUnrecorded runs trivial and stencil_1d at width 2 on host:2,
// 1000 timesteps of -iters iterations, their tasks made afresh each time
// (the host2 kind): the time per task, at a fixed size, where METG's sweep
// moves with the machine's noise.
func BenchmarkTBUnrecorded(b *testing.B) {
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithOffload("MANDATORY")); err != nil {
		b.Fatal(err)
	}
	defer offload.Stop()
	devs := []offload.Device{offload.On(0), offload.On(1)}
	for _, s := range []string{"trivial", "stencil_1d"} {
		for _, iters := range []int64{1, 64} {
			b.Run(fmt.Sprintf("%s/iters=%d", s, iters), func(b *testing.B) {
				g := tbGraph{Pattern: tbForWidth(mustPattern(b, s), 2), Width: 2, Steps: 1000, Kernel: tbComputeBound, Iters: iters}
				var wall float64
				for range b.N {
					d, err := runTBDevices(context.Background(), g, devs)
					if err != nil {
						b.Fatal(err)
					}
					wall += float64(d.Nanoseconds())
				}
				b.ReportMetric(wall/float64(b.N*g.Steps*g.Width), "ns/task")
			})
		}
	}
}
