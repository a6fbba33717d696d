package state

import (
	"errors"
	"testing"

	"github.com/goffload/offload/plugins/remote/proto"
)

func newPart() *int { return new(int) }

// TestGraphRules drives a part through its life: defined in two frames,
// run, its arguments changed only between runs, freed while a run is in
// flight (let go by the run's end), and every frame out of order refused.
func TestGraphRules(t *testing.T) {
	gs := NewGraphs[*int]()
	p, err := gs.Define(1, newPart)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := gs.Define(1, newPart); err != nil || q != p {
		t.Fatalf("second GraphDef before a run: %v, %v", q, err)
	}
	bad := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, proto.ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", what, err)
		}
	}
	_, err = gs.Run(2, 1, false)
	bad("run of an undefined graph", err)
	if _, err := gs.Run(1, 5, true); err != nil {
		t.Fatal(err)
	}
	_, err = gs.Define(1, newPart)
	bad("GraphDef after a run", err)
	_, err = gs.Set(1)
	bad("GraphSet while a run is in flight", err)
	_, err = gs.Run(1, 6, true)
	bad("run with changes while one is in flight", err)
	_, err = gs.Run(1, 5, false)
	bad("run of an old generation", err)
	if _, err := gs.Run(1, 6, false); err != nil {
		t.Fatalf("a second run without changes: %v", err)
	}
	if _, drop := gs.Done(1); drop {
		t.Fatal("a part not freed dropped")
	}
	_, err = gs.Set(1)
	bad("GraphSet while the second run is in flight", err)
	gs.Done(1)
	if _, err := gs.Set(1); err != nil {
		t.Fatalf("GraphSet between runs: %v", err)
	}
	if _, err := gs.Run(1, 7, false); err != nil {
		t.Fatal(err)
	}
	if _, drop, err := gs.Free(1); drop || err != nil {
		t.Fatalf("free while a run is in flight: drop %v, %v", drop, err)
	}
	if gs.Len() != 1 {
		t.Fatalf("%d parts while the last run is in flight, want 1", gs.Len())
	}
	_, err = gs.Run(1, 8, false)
	bad("run after free", err)
	_, _, err = gs.Free(1)
	bad("second free", err)
	if h, drop := gs.Done(1); !drop || h != p {
		t.Fatalf("the last run's end: %v, drop %v", h, drop)
	}
	if gs.Len() != 0 {
		t.Fatalf("%d parts after the free and the run's end, want 0", gs.Len())
	}
	gs.Define(3, newPart)
	if _, drop, _ := gs.Free(3); !drop || gs.Len() != 0 {
		t.Fatalf("free of an idle part: drop %v, %d parts", drop, gs.Len())
	}
	gs.Define(4, newPart)
	if all := gs.End(); len(all) != 1 || gs.Len() != 0 {
		t.Fatalf("End: %d parts, %d left", len(all), gs.Len())
	}
}
