package main

import (
	"fmt"
	"time"

	"github.com/goffload/offload"
)

// The recorded kinds (host2-graph, local2-graph): each point's graph of T
// timesteps is recorded once (offload.Taskgraph) and replayed at each of
// the point's runs: by Replay (the function not called) where the run's
// graph is the last one's, by Run (the compute_bound iterations, a
// scalar, read again from the point) where it is not.

// tbRecorded is a point's recorded graph and the buffers it runs on.
type tbRecorded struct {
	st  *tbState
	tg  *offload.Taskgraph
	cur tbGraph // the run's graph: its scalars are the replay's
}

// tbGraphKind is kind name: goffload on devices first to first+n-1, each
// point's graph recorded at its first run (not timed) and replayed.
func tbGraphKind(env *Env, suite, name string, first, n int) (tbRunner, error) {
	devs, err := tbDevices(env, suite, name, first, n, "; each point's graph recorded once (offload.Taskgraph) and replayed")
	if err != nil {
		return tbRunner{}, err
	}
	recs := map[string]*tbRecorded{}
	pattern := ""
	return tbRunner{Name: name, Width: n, Run: func(g tbGraph) (time.Duration, error) {
		if g.Pattern.Name() != pattern { // a new sweep: the last one's graphs go
			for k, r := range recs {
				if err := r.st.unmap(); err != nil {
					return 0, err
				}
				delete(recs, k)
			}
			pattern = g.Pattern.Name()
		}
		return runTBRecorded(recs, g, devs)
	}}, nil
}

// runTBRecorded runs g by a replay of its recorded graph, recording it
// first if recs has none for its shape, and returns the time from Run to
// the end of its task's Wait. The last timestep's outputs are cleared on
// their devices before (not timed) and checked after.
func runTBRecorded(recs map[string]*tbRecorded, g tbGraph, devs []offload.Device) (time.Duration, error) {
	key := fmt.Sprintf("%s/%d/%d/%d/%d/%d", g.Pattern.Name(), g.Width, g.Steps, g.Kernel, g.Scratch, g.Samples)
	r := recs[key]
	if r == nil {
		st, err := tbSetUp(g, devs)
		if err != nil {
			return 0, err
		}
		r = &tbRecorded{st: st, cur: g}
		var terr error
		r.tg = offload.NewTaskgraph(func(rec *offload.Recorder) error {
			r.st.g = r.cur
			terr = r.st.tasks(rec.Nowait)
			return terr
		})
		if err := r.tg.Run().Wait(); err != nil {
			return 0, fmt.Errorf("taskbench: recording %s: %w", key, err)
		}
		if !r.tg.Recorded() {
			return 0, fmt.Errorf("taskbench: %s: not recorded", key)
		}
		recs[key] = r
	}
	run := r.tg.Replay // the recorded scalars: the function is not called
	if r.cur != g {    // other iterations: the function gives the replay its scalars
		run = r.tg.Run
	}
	r.cur = g
	final := (g.Steps - 1) % 2
	for p := range g.Width {
		o := r.st.out[final][p]
		o[0], o[1] = -1, -1
		if err := devs[r.st.owner(p)].Update(offload.To(o)); err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	err := run().Wait()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("taskbench: replaying %s: %w", key, err)
	}
	return d, r.st.check()
}
