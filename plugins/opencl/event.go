package opencl

import (
	"fmt"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin/gpukind"
)

// An event is the cl_event of a marker and what the host knows of it
// (gpukind.Event). The marker's cl_event is set when the record is issued; it
// is 0 until then. It is released once the event is closed, nothing refers to
// it, and the marker is complete. The device releases the others when it
// closes.
type event = gpukind.Event[cldrv.Event]

// events is the device as its events' driver (gpukind.EventDriver). An
// error of the driver about an event loses the device.
type events device

// Done reports whether the marker is complete.
func (v *events) Done(cl cldrv.Event) (bool, error) {
	d := (*device)(v)
	st, err := d.lib.EventStatus(cl)
	switch {
	case err != nil:
		return true, d.lose(err)
	case st < 0:
		return true, d.lose(fmt.Errorf("the work before an event failed: %s", cldrv.Status(st).Name()))
	}
	return st == cldrv.Complete, nil
}

// Wait waits in clWaitForEvents for the marker.
func (v *events) Wait(cl cldrv.Event) (bool, error) {
	if err := (*device)(v).lib.WaitForEvents([]cldrv.Event{cl}); err != nil {
		return true, (*device)(v).lose(err)
	}
	return v.Done(cl)
}

// Release releases the marker's cl_event.
func (v *events) Release(cl cldrv.Event) { (*device)(v).lib.ReleaseEvent(cl) }
