// Package tracefile holds the traces of GOFFLOAD_PROFILE, in Chrome's
// Trace Event Format. Trace writes one: it is the tool.Tool the runtime
// adds for the profile. Read reads one back, for the tools and tests that
// look into them.
package tracefile

import (
	"encoding/json"
	"fmt"
	"io"
)

// Event is one trace event, as far as goffload's traces use the format.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"` // X: complete, s/f: arrow ends, i: instant, M: metadata
	Ts   float64        `json:"ts"` // µs from the trace's start
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"` // the device
	Tid  int            `json:"tid"` // the track
	ID   uint64         `json:"id"`  // an arrow's
	Args map[string]any `json:"args"`
}

// End is when a complete event ends.
func (e Event) End() float64 { return e.Ts + e.Dur }

// Read decodes a trace.
func Read(r io.Reader) ([]Event, error) {
	var tr struct {
		TraceEvents []Event `json:"traceEvents"`
	}
	if err := json.NewDecoder(r).Decode(&tr); err != nil {
		return nil, fmt.Errorf("not a trace (want Chrome's Trace Event Format, as GOFFLOAD_PROFILE writes it): %w", err)
	}
	return tr.TraceEvents, nil
}
