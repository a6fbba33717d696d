package offload_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestProfileUnwritableAtStart (issue 34): a GOFFLOAD_PROFILE path that
// cannot be written fails Start, naming it, instead of Stop after the
// whole run, and leaves nothing behind: kernels can be registered after
// it, as after any Start that failed; a writable one starts, and Start
// leaves nothing there before Stop writes the trace.
func TestProfileUnwritableAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "no-such-dir", "trace.json")
	err := offload.Start(offload.WithDevices("host"), offload.WithProfile(bad))
	if err == nil {
		offload.Stop()
		t.Fatal("Start with an unwritable GOFFLOAD_PROFILE succeeded")
	}
	if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), bad) {
		t.Errorf("Start: %v, want ErrConfig naming %s", err, bad)
	}
	name := fmt.Sprintf("test.profile.after.%d", sigRuns.Add(1))
	if _, err := offload.NewKernel(name, func(ctx offload.Ctx, x []int64) {}); err != nil {
		t.Errorf("registering a kernel after the refused Start: %v", err)
	}
	good := filepath.Join(dir, "trace.json")
	if err := offload.Start(offload.WithDevices("host"), offload.WithProfile(good)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(good); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start left a file at the profile's path: %v", err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(good); err != nil {
		t.Errorf("Stop wrote no trace: %v", err)
	}
}
