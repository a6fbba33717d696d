package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/kernelgen"
	"github.com/goffload/offload/internal/opencltest"
)

// TestGeneratedUpToDate: zz_offload_gen.go is what goffload-gen makes of
// the package now (run go generate ./taskbench_kernels.go in bench where
// it is stale), and the Task Bench kernels are in it.
func TestGeneratedUpToDate(t *testing.T) {
	res, err := kernelgen.Generate(".", kernelgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Refused {
		if strings.Contains(r.Error(), "taskbench") {
			t.Errorf("refused: %v", r)
		}
	}
	for i := range tbMaxInputs + 1 {
		if k := fmt.Sprintf("tbTask%d", i); !slices.Contains(res.Translated, k) {
			t.Errorf("%s not translated: translated %v", k, res.Translated)
		}
	}
	old, err := os.ReadFile(kernelgen.DefaultOutput)
	if err != nil {
		t.Fatal(err)
	}
	if string(old) != string(res.Go) {
		t.Errorf("%s is stale: run go generate ./taskbench_kernels.go in bench", kernelgen.DefaultOutput)
	}
}

// TestTBOpenCL runs Task Bench graphs on two devices that share the
// machine's OpenCL device (PoCL in CI), mandatory, so that the tasks run
// the OpenCL C that goffload-gen made of the kernels' Go bodies
// (zz_offload_gen.go), which check their inputs themselves: trivial,
// stencil_1d and nearest_r3 at width 2, nearest_r5 at width 5 (tasks of 3
// to 5 inputs), with compute_bound and memory_bound. memory_bound's
// scratch comes back as tbExecute leaves it on the host, and a task given
// a stale input fails with ErrKernelFailed naming the kernel and the
// check's line, on the OpenCL device and on a host device. It skips
// without an OpenCL device, unless GOFFLOAD_REQUIRE_OPENCL is set.
func TestTBOpenCL(t *testing.T) {
	opencltest.Need(t)
	if err := offload.Start(offload.WithDevices("opencl:0,opencl:0,host"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	ctx := context.Background()
	devs := []offload.Device{offload.On(0), offload.On(1)}
	for _, c := range []struct {
		pat string
		w   int
	}{{"trivial", 2}, {"stencil_1d", 2}, {"nearest_r3", 2}, {"nearest_r5", 5}} {
		for _, k := range []tbKernelKind{tbComputeBound, tbMemoryBound} {
			g := tbGraph{Pattern: tbForWidth(mustPattern(t, c.pat), c.w), Width: c.w, Steps: 4, Kernel: k, Iters: 3, Scratch: 8, Samples: 2}
			if _, err := runTBDevices(ctx, g, devs); err != nil {
				t.Errorf("%s width %d, %s: %v", c.pat, c.w, tbKernelNames[k], err)
			}
		}
	}

	// memory_bound on the device moves what it moves on the host.
	m := tbGraph{Pattern: tbPattern{Kind: tbNoComm}, Width: 1, Kernel: tbMemoryBound, Iters: 3, Scratch: 16, Samples: 4}
	host, dev := m.scratch(), m.scratch()
	for i := range host {
		if i%4 != 0 {
			host[i], dev[i] = int64(i), int64(i)
		}
	}
	out := make([]int64, 2)
	if err := tbExecute(m.args(1, 0), out, host, [][]int64{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if err := tbTask1.Run(devs[0], m.args(1, 0), out, dev, []int64{0, 0}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dev, host) || out[0] != 1 || out[1] != 0 {
		t.Errorf("memory_bound on %s: scratch %v, output %v; want %v, [1 0] (the host's)", devs[0], dev, out, host)
	}

	// A task given another task's output fails, naming the kernel and
	// the line of the check; on a CPU device the value says what it held.
	at := "taskbench_kernels.go:" + lineOf(t, "taskbench_kernels.go", "panic(tbInputError(a, k, x))")
	a := tbGraph{Pattern: tbPattern{Kind: tbNoComm}, Width: 1, Kernel: tbEmpty}.args(3, 0)
	for _, d := range []int{1, 2} {
		scratch, stale := []int64{tbMagic, 0}, []int64{1, 0}
		err := tbTask1.Nowait(offload.On(d).Nowait(), a, out, scratch, stale).Wait()
		var kp *offload.KernelPanic
		if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) || kp.Kernel != "taskbench.task1" || kp.At != at {
			t.Errorf("device %d: a task with a stale input: %v, want a kernel failure of taskbench.task1 at %s", d, err, at)
		}
		if info, _ := offload.On(d).Info(); info.Kind == "host" && !strings.Contains(err.Error(), "holds (t=1, p=0), want (t=2, p=0)") {
			t.Errorf("host device: %v, want the pair it held", err)
		}
		t.Logf("device %d: %v", d, err)
	}
	offload.Taskwait(ctx)
}

// lineOf is the number of the only line of file that contains s.
func lineOf(t *testing.T, file, s string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), s) {
			if at != "" {
				t.Fatalf("%s: %q on lines %s and %d", file, s, at, n)
			}
			at = fmt.Sprint(n)
		}
	}
	if at == "" {
		t.Fatalf("%s: no line with %q", file, s)
	}
	return at
}

// TestTaskbenchOpenCL2: kind opencl2 measures a sweep and a METG row or
// says why there is none.
func TestTaskbenchOpenCL2(t *testing.T) {
	opencltest.Need(t)
	defer restoreTaskbench()()
	var out, errOut bytes.Buffer
	if err := run([]string{"-suite", "taskbench", "-format", "tsv", "-time", "10ms", "-rounds", "1",
		"-taskbench-patterns", "stencil_1d", "-taskbench-kinds", "opencl2", "-taskbench-max-iters", "2"}, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, errOut.String(), out.String())
	}
	const metric = "taskbench.stencil_1d.opencl2"
	if !strings.Contains(out.String(), "\n# "+metric+" sweep (iterations:granularity/efficiency): 1:") ||
		(!strings.Contains(out.String(), "\n"+metric+".metg\t") && !strings.Contains(out.String(), "\n# "+metric+".metg: not reported: ")) {
		t.Errorf("no sweep line, or neither a row nor a reason, for %s:\n%s", metric, out.String())
	}
}
