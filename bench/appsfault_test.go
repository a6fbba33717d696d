package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// TestAppsFault runs the rows of a device lost halfway through Cholesky at
// a small size: both rows come out with their breakdowns, every
// factorization checked (appsCholeskyFault fails otherwise), nothing of
// the stopped runtimes' device processes is left, and the suite's own
// devices are back afterwards.
func TestAppsFault(t *testing.T) {
	defer restoreAppsSizes()()
	appsTiles, appsB = 5, 16
	// A timeout that a loaded machine's pauses under -race do not reach:
	// a device lost by mistake would be a failure of the run.
	appsFaultTimeout = time.Second
	if err := offload.Start(offload.WithDevices(appsDevices), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	var out bytes.Buffer
	env := &Env{Budget: time.Millisecond, Rounds: 2, out: tsvPrinter{w: &out}}
	if err := appsCholeskyFault(env); err != nil {
		t.Fatalf("appsCholeskyFault: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	for _, want := range []string{"\napps.cholesky_any_killed_vs_clean\t", "\napps.cholesky_any_stopped_vs_clean\t",
		"# apps.cholesky_any_killed_vs_clean: clean ", "# apps.cholesky_any_stopped_vs_clean: clean ", "device processes left 0\n"} {
		if !strings.Contains("\n"+out.String(), want) {
			t.Errorf("the output has no %q", strings.TrimSpace(want))
		}
	}
	if n := offload.NumDevices(); n != 2 {
		t.Fatalf("%d devices afterwards, want the 2 of %q", n, appsDevices)
	}
	for d := range 2 {
		if err := offload.On(d).Run(benchEmpty); err != nil {
			t.Errorf("device %d afterwards: %v", d, err)
		}
	}
}
