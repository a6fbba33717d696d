package plugintest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOutOfModulePlugin proves that the plugin contract is public: a device
// kind in a module of its own, testdata/outside, written only against the
// public packages plugin and plugin/opqueue (it could not import this
// module's internal packages if it tried), must pass `go vet` and its tests — this conformance suite, and the
// whole runtime started with its devices running typed kernels with map
// clauses. The module is built offline (GOPROXY=off, from the module cache),
// against this checkout through its replace directive; GOWORK=off keeps a
// workspace out of it, and -mod=mod lets the go command add to go.mod what
// it finds missing rather than fail (the test then fails, naming the file
// to commit).
//
// The nested go test runs without -race even when this test runs under it:
// the race detector would rebuild the runtime and its dependencies for the
// nested binary, several times the test's time on a small machine. (The
// kind's tests pass under -race too: run `go test -race ./...` in
// testdata/outside.)
func TestOutOfModulePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests another module: not under -short")
	}
	dir := filepath.Join("testdata", "outside")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		// A module zip (what the module cache holds) leaves out nested
		// modules.
		t.Skipf("the out-of-module kind is not in this copy of the module: %v", err)
	}
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Skipf("no go command to build the out-of-module kind with: %v", err)
	}

	// The committed go.mod and go.sum must be what the go command wants:
	// -mod=mod would rewrite stale ones in the source tree.
	files := []string{"go.mod", "go.sum"}
	before := make([][]byte, len(files))
	for i, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		before[i] = b
	}
	defer func() {
		for i, f := range files {
			p := filepath.Join(dir, f)
			if after, err := os.ReadFile(p); err == nil && !bytes.Equal(after, before[i]) {
				t.Errorf("the go command changed %s:\n%s\ncommit the new one (it is restored to the committed one now)", p, after)
				if err := os.WriteFile(p, before[i], 0o644); err != nil {
					t.Errorf("restoring %s: %v", p, err)
				}
			}
		}
	}()

	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
		defer cancel()
	}
	// The last value of a variable in Env wins.
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	for _, args := range [][]string{
		{"vet", "./..."},
		{"test", "-count=1", "-timeout=5m", "./..."},
	} {
		start := time.Now()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		what := "go " + strings.Join(args, " ") + " in " + dir
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("%s: ran out of the test's time: %v\n%s", what, err, out)
			}
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		t.Logf("%s: %v\n%s", what, time.Since(start).Round(time.Millisecond), bytes.TrimSpace(out))
	}
}
