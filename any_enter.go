package offload

import (
	"fmt"

	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
)

// anyEnterData is Any().EnterData: each To or Alloc clause names a whole
// buffer as Any-tasks' before a task uses a part of it, so that its
// sections may then be any parts of it (a band each, then rows across
// bands): without it, the first section a task uses is the extent the
// later ones must lie in. Nothing is copied or allocated: the program's
// copy is the valid one until tasks write parts of it, and its first
// version is kept for re-runs (a copy of it) only once a task reads a
// part no task wrote. Until Taskwait gives the buffers back, as for the
// buffers tasks name.
func anyEnterData(maps []Map) error {
	rt, err := runtimeOrErr()
	if err != nil {
		return err
	}
	for i, m := range maps {
		if m.err != nil {
			return m.err
		}
		if !m.slice.IsValid() || m.item.Type&^(mapping.MapTo|mapping.MapImplicit) != 0 {
			return fmt.Errorf("goffload: Any(): enter data: clause %d: %w: Any() takes To and Alloc clauses here (whole buffers for Any-tasks; the runtime copies what tasks need itself)", i, ErrBadMap)
		}
	}
	if len(rt.Devices) == 0 { // Any-tasks run on the initial device, on the program's memory
		return nil
	}
	s := anyFor(rt)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range maps {
		if m.item.Buf.Size == 0 {
			continue
		}
		b := placement.Buf{Addr: m.item.Buf.Addr(), Size: uintptr(m.item.Buf.Size)}
		region, made, err := s.table.Track(b)
		if err != nil {
			return fmt.Errorf("goffload: Any(): enter data: clause %d (%q): %w: %w: call Taskwait, which gives Any-tasks' buffers back, first", i, m.item.Buf.Name, ErrBadMap, err)
		}
		if made {
			name := m.item.Buf.Name
			if name == "" {
				name = fmt.Sprintf("Any().EnterData's clause %d", i)
			}
			s.bufs[region] = anyBuf{v: m.slice, name: name, first: true}
		}
	}
	s.tracked.Store(int64(s.table.Len()))
	return nil
}
