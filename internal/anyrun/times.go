package anyrun

import (
	"time"

	"github.com/goffload/offload/plugin"
)

// Kernel times as the devices measure them. The placement model learns a
// kernel's time on a device from each Any-task's run there. Seen from the
// host, a task ends when the device's notice of it arrives. A device sends the
// ends of several tasks together. A short kernel that ended in the same notice
// as the one before it looks as if it took no time. One behind a late notice
// looks slow. Some devices can time their queues' operations (plugin.Tracer:
// local, tcp, mpi, host, CUDA, OpenCL). There the runtime has them time every
// construct's operations from the first Any-task on. That is core's
// Device.TimeOps: a tag per construct, and its operations' times beside its
// events. An Any-task's kernel time is then its launch's on the device's
// clock. A device that does not time them is learned from as before
// (placement.Model.Done's rule).

// timeOps asks every device to time its operations for s.
func (s *anySched) timeOps() {
	for _, d := range s.rt.Devices {
		d.TimeOps(s.opTime)
	}
}

// opTime takes a device's report of an operation: a launch of a task in
// launched is its kernel's time there.
func (s *anySched) opTime(o plugin.OpTime) {
	if o.Kind != plugin.OpLaunch || o.Err || o.Tag == 0 {
		return
	}
	s.tmu.Lock()
	if _, ok := s.launched[o.Tag]; ok {
		s.launched[o.Tag] = max(o.End.Sub(o.Start), time.Nanosecond)
	}
	s.tmu.Unlock()
}

// launching records that task id's kernel time is wanted. The report may have
// come before, from a device that ran it at once; it is lost then.
func (s *anySched) launching(id uint64) {
	s.tmu.Lock()
	s.launched[id] = 0 // opTime fills in only the tasks here
	s.tmu.Unlock()
}

// took returns task id's kernel time on its device (0 if not reported),
// and forgets the task.
func (s *anySched) took(id uint64) time.Duration {
	if id == 0 {
		return 0
	}
	s.tmu.Lock()
	d := s.launched[id]
	delete(s.launched, id)
	s.tmu.Unlock()
	return d
}
