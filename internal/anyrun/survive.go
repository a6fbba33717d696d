package anyrun

import (
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/placement"
)

// Versions that survive a loss. A re-run needs its inputs as their
// writers left them. Before it runs those writers again (and theirs, back
// to the first versions), it looks for a device that works and still
// holds the part as the writer left it: the device the writer ran on, or
// one a copy brought that version to. A lost device's own unfinished
// work, and what only it held, is then all that is computed again.
//
// A device copy holds a writer's version once the writer's task or the
// copy completed well (anyEntry.at records it then) and until a task that
// writes the part, or a copy of a newer version, runs there. Such a task
// is placed before it can start, and every placement of a write or a copy
// into a region's copy on a device counts in anySched.mods; the record
// keeps the count its own placement left. So:
//
//   - where the reader's construct depends on the part (a recovery of
//     the task that reads it, a restore, a copy: "top"), no task that
//     writes the part runs before the reader is done (they wait for it):
//     the record alone says the copy holds the version;
//   - elsewhere (the inputs of a writer re-run for it), the copy holds
//     the version if nothing was placed there since, before the read and
//     after it (a later placement is always counted before its task can
//     start, so a read that sees the same count after it read what the
//     writer left).
//
// Freeing a copy to make room (evict) counts in anyRerun.evicts, which a
// read checks the same way.

// anyHeld says that device dev's copy of buf held what the task wrote,
// once the task or a copy there completed. mods is the count of
// placements on dev's copy of buf's region. stamp is its value that the
// placement left.
type anyHeld struct {
	buf   placement.Buf
	dev   int
	mods  *atomic.Uint64
	stamp uint64
}

// placed counts a placement of a write (or copy) into region's copy on
// dev and returns what held records; s.mu is held.
func (s *anySched) placed(region placement.Buf, dev int, buf placement.Buf) anyHeld {
	k := anyTok{region, dev}
	c := s.mods[k]
	if c == nil {
		c = new(atomic.Uint64)
		s.mods[k] = c
	}
	return anyHeld{buf: buf, dev: dev, mods: c, stamp: c.Add(1)}
}

// heldBy records, once a copy completed well, that its device's copy
// holds the parts of pieces as their writers left them.
func (s *anySched) heldBy(pieces []placement.Piece, h anyHeld) {
	s.rr.mu.Lock()
	defer s.rr.mu.Unlock()
	for _, p := range pieces {
		if e := s.rr.entries[p.Writer]; e != nil {
			h.buf = p.Buf
			e.at = append(e.at, h)
		}
	}
}

// held records, once e's task completed well on its device, that its
// copies there hold what it wrote (hs, from placed).
func (s *anySched) held(e *anyEntry, hs []anyHeld) {
	s.rr.mu.Lock()
	defer s.rr.mu.Unlock()
	e.at = append(e.at, hs...)
}

// intact reports whether h's copy still holds the version. It does if nothing
// was placed there since. With top (as for version), it does if nothing that
// writes it runs before the reader is done.
func (h anyHeld) intact(top bool) bool { return top || h.mods.Load() == h.stamp }

// survivor returns p's bytes as its writer left them, or nil. It reads them
// from the first of holders hs that still holds them. hs are
// placement.SourceOf's, their Refs in held. top is as for version.
func (s *anySched) survivor(p placement.Piece, hs []placement.Holder, held []anyHeld, top bool) []byte {
	s.rr.mu.Lock()
	e := s.rr.entries[p.Writer]
	s.rr.mu.Unlock()
	if e == nil || e.t == nil { // forgotten meanwhile (Taskwait)
		return nil
	}
	x, _ := e.part(p.Buf)
	for _, ph := range hs {
		h := held[ph.Ref]
		evicts := s.rr.evicts.Load()
		cd := s.rt.Devices[h.dev]
		dp, err := cd.MappedPtr(sliceBuf(x, ""))
		if err != nil {
			continue
		}
		data := make([]byte, p.Buf.Size)
		if err := core.Memcpy(core.Loc{Host: data}, core.Loc{Dev: cd, Ptr: dp}, int64(p.Buf.Size)); err != nil || s.rr.evicts.Load() != evicts || !h.intact(top) {
			continue
		}
		s.rt.Log.Taskf(config.InfoPlacement, h.dev, e.task.Load(), "Any(): %s's output (%d bytes at %#x) read from device %d, which still holds it as the task left it: not run again", e.t.Kernel.Name(), p.Buf.Size, p.Buf.Addr, h.dev)
		s.rt.Note(e.task.Load(), fmt.Sprintf("Any(): its output (%d bytes at %#x) read from device %d after a loss, not run again", p.Buf.Size, p.Buf.Addr, h.dev))
		return data
	}
	return nil
}

// part returns the section of the argument that e wrote b through (a
// part of a written access), if there is one.
func (e *anyEntry) part(b placement.Buf) (reflect.Value, bool) {
	t := e.t
	for i, a := range t.acc {
		if !a.Write || !b.Inside(a.Buf) {
			continue
		}
		v := t.Args[t.argOf[i]].Slice
		es := v.Type().Elem().Size()
		off := b.Addr - a.Buf.Addr
		if es == 0 || off%es != 0 || b.Size%es != 0 {
			return reflect.Value{}, false
		}
		return v.Slice(int(off/es), int((off+b.Size)/es)), true
	}
	return reflect.Value{}, false
}
