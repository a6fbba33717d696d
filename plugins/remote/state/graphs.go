package state

import (
	"fmt"

	"github.com/goffload/offload/plugins/remote/proto"
)

// The rules of recorded graphs on a device (GraphDef, GraphSet, GraphRun,
// GraphFree), as Graphs keeps them:
//
//   - A part is defined by one or more GraphDef frames, all before its
//     first run; a GraphDef after it, or for a part freed, is a protocol
//     error.
//   - Its launches' arguments change (GraphSet, a GraphRun's own) only
//     while no run of it is in flight: a run reads them as it goes.
//   - Each run has a new generation, higher than the last one's: the
//     devices' signals are told apart by it.
//   - GraphFree forgets the part once the runs in flight are done; a run
//     or a change after it is a protocol error.
//   - The table shrinks with the frees and ends with the session (End).

// Graphs is a device session's table of the graph parts its host defined, by
// the host's number for each. G is the engine's handle of a part.
type Graphs[G any] struct {
	parts map[uint64]*graphEntry[G]
}

type graphEntry[G any] struct {
	h       G
	ran     bool   // a run began: no more GraphDef
	runs    int    // runs in flight
	lastGen uint64 // the last run's generation
	freed   bool
}

// NewGraphs returns an empty table.
func NewGraphs[G any]() *Graphs[G] { return &Graphs[G]{parts: map[uint64]*graphEntry[G]{}} }

func graphErr(id uint64, format string, a ...any) error {
	return fmt.Errorf("%w: graph %d: %s", proto.ErrFrame, id, fmt.Sprintf(format, a...))
}

// Define returns the part a GraphDef for graph id adds to. That is the one
// defined so far, or a new one from make.
func (gs *Graphs[G]) Define(id uint64, make func() G) (G, error) {
	e := gs.parts[id]
	if e == nil {
		e = &graphEntry[G]{h: make()}
		gs.parts[id] = e
		return e.h, nil
	}
	var zero G
	switch {
	case e.freed:
		return zero, graphErr(id, "defined after it was freed")
	case e.ran:
		return zero, graphErr(id, "defined further after its first run")
	}
	return e.h, nil
}

// Set returns the part whose arguments a GraphSet changes.
func (gs *Graphs[G]) Set(id uint64) (G, error) {
	e, err := gs.live(id, "arguments changed")
	if err != nil {
		return e.h, err
	}
	if e.runs > 0 {
		return e.h, graphErr(id, "arguments changed while %d runs are in flight", e.runs)
	}
	return e.h, nil
}

// Run registers run gen of graph id and returns the part. If changes is set,
// the run changes its arguments first.
func (gs *Graphs[G]) Run(id, gen uint64, changes bool) (G, error) {
	e, err := gs.live(id, "run")
	if err != nil {
		return e.h, err
	}
	if changes && e.runs > 0 {
		return e.h, graphErr(id, "arguments changed while %d runs are in flight", e.runs)
	}
	if e.ran && gen <= e.lastGen {
		return e.h, graphErr(id, "run %d after run %d", gen, e.lastGen)
	}
	e.ran, e.runs, e.lastGen = true, e.runs+1, gen
	return e.h, nil
}

func (gs *Graphs[G]) live(id uint64, what string) (*graphEntry[G], error) {
	e := gs.parts[id]
	switch {
	case e == nil:
		return &graphEntry[G]{}, graphErr(id, "%s, never defined", what)
	case e.freed:
		return e, graphErr(id, "%s after it was freed", what)
	}
	return e, nil
}

// Done ends a run of graph id. drop says the part is to be let go now: it was
// freed, and that was its last run in flight.
func (gs *Graphs[G]) Done(id uint64) (h G, drop bool) {
	e := gs.parts[id]
	if e == nil || e.runs == 0 {
		return h, false
	}
	e.runs--
	if e.freed && e.runs == 0 {
		delete(gs.parts, id)
		return e.h, true
	}
	return e.h, false
}

// Free forgets graph id. drop says it is to be let go now. Else its last run
// in flight does (Done).
func (gs *Graphs[G]) Free(id uint64) (h G, drop bool, err error) {
	e, err := gs.live(id, "freed")
	if err != nil {
		return h, false, err
	}
	e.freed = true
	if e.runs == 0 {
		delete(gs.parts, id)
		return e.h, true, nil
	}
	return e.h, false, nil
}

// End forgets every part (the session is over) and returns them.
func (gs *Graphs[G]) End() []G {
	var all []G
	for _, e := range gs.parts {
		all = append(all, e.h)
	}
	gs.parts = map[uint64]*graphEntry[G]{}
	return all
}

// Len is how many parts the table holds.
func (gs *Graphs[G]) Len() int { return len(gs.parts) }
