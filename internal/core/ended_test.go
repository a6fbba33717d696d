package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

func init() {
	plugin.RegisterKind(plugin.Kind{Name: "ended", Order: 1001,
		Help: "ended  a kind ended for good in this process (internal/core's tests)",
		Open: func(string) ([]plugin.Device, error) {
			return nil, fmt.Errorf("%w: MPI ended with offload.Stop", plugin.ErrKindEnded)
		}})
}

// TestStartKindEnded (issue 34): a kind that was ended for good in this
// process (MPI after Stop) fails Start under MANDATORY and DEFAULT alike:
// falling back to the initial device would run a whole job's work on the
// host without a word. DISABLED opens no device, so it starts.
func TestStartKindEnded(t *testing.T) {
	for _, p := range []config.Policy{config.PolicyDefault, config.PolicyMandatory} {
		r, err := Start(config.Config{Devices: "ended", DevicesSet: true, Policy: p})
		if err == nil {
			r.Stop()
			t.Errorf("policy %v: Start with an ended kind succeeded", p)
			continue
		}
		if !errors.Is(err, config.ErrConfig) || !errors.Is(err, plugin.ErrKindEnded) {
			t.Errorf("policy %v: Start: %v, want config.ErrConfig wrapping ErrKindEnded", p, err)
		}
	}
	r, err := Start(config.Config{Devices: "ended", DevicesSet: true, Policy: config.PolicyDisabled})
	if err != nil {
		t.Fatalf("DISABLED: %v", err)
	}
	r.Stop()
}
