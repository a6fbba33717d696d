package placement

// A re-run reads its inputs as their writers left them. Source says
// where each piece comes from, as a function of what the runtime holds
// of the piece's writer; reading it there is the runtime's work.

// Source is where a re-run reads a piece of its inputs from.
type Source int

const (
	// FromSnapshot is the region's first version: no task wrote the piece.
	FromSnapshot Source = iota + 1
	// FromMemo is the writer's outputs as its re-run (made, or being made)
	// or a host task itself kept them.
	FromMemo
	// FromSaved is a part of the writer's outputs read before from a
	// device that still held it.
	FromSaved
	// FromSurvivor is a device copy that still holds the writer's version.
	FromSurvivor
	// FromRerun is the writer, run again.
	FromRerun
)

// String names the source, for messages and tests.
func (s Source) String() string {
	switch s {
	case FromSnapshot:
		return "snapshot"
	case FromMemo:
		return "memo"
	case FromSaved:
		return "saved"
	case FromSurvivor:
		return "survivor"
	case FromRerun:
		return "rerun"
	}
	return "none"
}

// Holder is a device copy that held a writer's version of Buf once the
// writer's task, or a copy there, completed. Intact says that nothing
// placed on that copy since may have changed it (the caller's count of
// placements there, or that the reader's own construct orders them).
type Holder struct {
	Buf    Buf
	Dev    int
	Intact bool
	Ref    int // the caller's, to find its own record of it
}

// Writer is what the runtime holds of the task that wrote a piece last.
type Writer struct {
	Memo    bool     // its outputs are kept, or its re-run is being made
	Saved   []Buf    // the parts of its outputs read from survivors before
	Holders []Holder // the device copies that held its version
}

// SourceOf returns where piece p comes from, given what the runtime holds
// of p's writer (w) and which devices work (usable). For FromSurvivor it
// also returns the holders to read from, in order; where each read
// fails, FromRerun is what is left.
func SourceOf(p Piece, w Writer, usable func(d int) bool) (Source, []Holder) {
	if p.Writer == 0 {
		return FromSnapshot, nil
	}
	if w.Memo {
		return FromMemo, nil
	}
	for _, b := range w.Saved {
		if p.Buf.Inside(b) {
			return FromSaved, nil
		}
	}
	var hs []Holder
	for _, h := range w.Holders {
		if p.Buf.Inside(h.Buf) && h.Intact && usable(h.Dev) {
			hs = append(hs, h)
		}
	}
	if len(hs) > 0 {
		return FromSurvivor, hs
	}
	return FromRerun, nil
}
