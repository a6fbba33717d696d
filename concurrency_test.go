package offload_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/goffload/offload"
)

// TestConcurrentMaps runs 64 goroutines × 1,000 map/launch/unmap iterations
// over one shared buffer (mapped, read and unmapped by everyone at once) and
// one private buffer each, and checks every result. Run under -race it also
// checks that no goroutine reads a half-copied mapping.
func TestConcurrentMaps(t *testing.T) {
	const (
		goroutines = 64
		iterations = 1000
		n          = 256
	)
	start(t, offload.WithDevices("host"), offload.WithOffload("MANDATORY"))
	d := offload.On(0)
	shared := make([]int32, n)
	for i := range shared {
		shared[i] = int32(i * 3)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			priv := make([]int32, n)
			for it := 0; it < iterations; it++ {
				if err := iteration(d, g, it, shared, priv); err != nil {
					errs <- fmt.Errorf("goroutine %d iteration %d: %w", g, it, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if e := offload.Entries(0); len(e) != 0 {
		t.Errorf("%d entries left mapped: %+v", len(e), e)
	}
}

func iteration(d offload.Device, g, it int, shared, priv []int32) error {
	switch it % 4 {
	case 0: // region: private from, shared to
		setAll(priv, -1)
		if err := d.Run(Copy, offload.From(priv), offload.To(shared)); err != nil {
			return err
		}
		for i := range priv {
			if priv[i] != shared[i] {
				return fmt.Errorf("copy of shared: priv[%d]=%d, want %d", i, priv[i], shared[i])
			}
		}
	case 1: // enter/exit data of the shared buffer around a private region
		if err := d.EnterData(offload.To(shared)); err != nil {
			return err
		}
		setAll(priv, 0)
		if err := d.Run(AddTo, int32(it), offload.ToFrom(priv)); err != nil {
			return err
		}
		if !allEqual(priv, int32(it)) {
			return fmt.Errorf("addto: priv=%v, want all %d", priv[:4], it)
		}
		if err := d.Run(Copy, offload.From(priv), shared); err != nil { // shared is present: used as is
			return err
		}
		last := len(priv) - 1
		if priv[last] != shared[last] {
			return fmt.Errorf("copy of present shared: priv[%d]=%d, want %d", last, priv[last], shared[last])
		}
		return d.ExitData(offload.Release(shared))
	case 2: // data region holding both
		setAll(priv, 0)
		err := d.Data(func() error {
			if err := d.Run(Copy, priv, shared); err != nil {
				return err
			}
			if priv[1] != 0 {
				return fmt.Errorf("present private buffer copied back inside its region")
			}
			return nil
		}, offload.To(shared).Hold(), offload.From(priv))
		if err != nil {
			return err
		}
		for i := range priv {
			if priv[i] != shared[i] {
				return fmt.Errorf("data region: priv[%d]=%d, want %d", i, priv[i], shared[i])
			}
		}
	default: // implicit tofrom of the private buffer
		if err := d.Run(Fill, int32(g), priv); err != nil {
			return err
		}
		if !allEqual(priv, int32(g)) {
			return fmt.Errorf("fill: priv=%v, want all %d", priv[:4], g)
		}
	}
	return nil
}
