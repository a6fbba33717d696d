package host_test

import (
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/host"
)

// benchKernel returns the conformance suite's addInt64 kernel (registered
// by plugintest, which this package's tests import).
func benchKernel(b *testing.B) plugin.Kernel {
	for _, k := range entries.Current().Kernels {
		if k.Name() == "plugintest.addInt64" {
			return k
		}
	}
	b.Fatal("plugintest.addInt64 is not registered")
	return nil
}

// BenchmarkLaunch launches a one-element kernel and synchronizes: on a
// queue whose operations go to its goroutine, and on an inline one (a
// synchronous construct's).
func BenchmarkLaunch(b *testing.B) {
	for _, inline := range []bool{false, true} {
		name := "queued"
		if inline {
			name = "inline"
		}
		b.Run(name, func(b *testing.B) {
			d := newLoaded(b, host.Config{Cores: 1})
			k := benchKernel(b)
			q, err := d.NewQueue()
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			q.(plugin.InlineQueue).SetInline(inline)
			x, err := d.Alloc(8)
			if err != nil {
				b.Fatal(err)
			}
			args := []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: int64(1)}}
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Launch(k, args); err != nil {
					b.Fatal(err)
				}
				if err := q.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSubmit copies 8 bytes to the device and synchronizes, on an
// inline queue.
func BenchmarkSubmit(b *testing.B) {
	d := newLoaded(b, host.Config{Cores: 1})
	q, err := d.NewQueue()
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	q.(plugin.InlineQueue).SetInline(true)
	x, err := d.Alloc(8)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Submit(x, src); err != nil {
			b.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}
