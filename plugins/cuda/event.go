package cuda

import (
	"fmt"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin/gpukind"
)

// An event is a CUDA event and what the host knows of it (gpukind.Event). Its
// CUDA event is made with the event, or taken from the device's pool. It goes
// back to the pool once three things hold. The event is closed, nothing
// enqueued refers to it, and its record is complete.
type event = gpukind.Event[cudadrv.Event]

// events is the device as its events' driver (gpukind.EventDriver and
// gpukind.HandleMaker).
type events device

// NewHandle returns a CUDA event from the pool, or a new one.
func (v *events) NewHandle() (cudadrv.Event, error) {
	d := (*device)(v)
	d.evmu.Lock()
	var cu cudadrv.Event
	if n := len(d.evFree); n > 0 {
		cu = d.evFree[n-1]
		d.evFree = d.evFree[:n-1]
	}
	d.evmu.Unlock()
	if cu != 0 {
		return cu, nil
	}
	err := d.with(func() (err error) {
		cu, err = d.drv.EventCreate(cudadrv.EventDisableTiming)
		return err
	})
	return cu, d.wrap(err)
}

// Done asks cuEventQuery whether cu's record is complete.
func (v *events) Done(cu cudadrv.Event) (bool, error) {
	d := (*device)(v)
	if err := d.alive(); err != nil {
		return false, err
	}
	err := d.with(func() error { return d.drv.EventQuery(cu) })
	if cudadrv.Code(err) == cudadrv.ErrNotReady {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", d.label(), d.wrap(err))
	}
	return true, nil
}

// Wait waits in cuEventSynchronize for cu's record.
func (v *events) Wait(cu cudadrv.Event) (bool, error) {
	d := (*device)(v)
	if err := d.with(func() error { return d.drv.EventSynchronize(cu) }); err != nil {
		return false, fmt.Errorf("%s: %w", d.label(), d.wrap(err))
	}
	return true, nil
}

// maxFreeEvents bounds the CUDA events kept for reuse.
const maxFreeEvents = 256

// Release takes back a CUDA event that nothing enqueued refers to any more,
// for reuse.
func (v *events) Release(cu cudadrv.Event) {
	d := (*device)(v)
	d.evmu.Lock()
	keep := len(d.evFree) < maxFreeEvents && d.alive() == nil
	if keep {
		d.evFree = append(d.evFree, cu)
	}
	d.evmu.Unlock()
	if !keep && d.alive() == nil {
		_ = d.drv.EventDestroy(cu)
	}
}
