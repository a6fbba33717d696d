package offload_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/plugins/opencl"
)

// The semantics matrix (issue 22): the runtime's map, update, data region
// and task tests run on every kind of device, not only on the host kind,
// because each kind moves memory its own way — the host kind in this
// process, device processes (local) over their shared-memory links, GPUs
// through the CUDA driver's streams and pinned staging, a tcp:// device
// process over protected (TLS 1.3) sessions on loopback — and each must
// give the same results.
//
// The matrix is a list of kinds and forEachKind, which runs a test's body
// once per kind as subtests named host, local, cuda-fake, opencl, tcp and
// the proxied kinds local-opencl and tcp-opencl (PoCL served by device
// processes; matrix_arch_test.go adds tcp-arm64 under qemu-user, and
// matrix_mpi_test.go runs the tests on the MPI kinds mpi and mpi-opencl,
// the ranks of an MPI job serving their CPUs and PoCL, in jobs under Open
// MPI's and MPICH's launchers);
// the body starts the runtime with k.start(t, n) (n devices of that kind) and reads
// k.label where an error names the device. This keeps each test as it was
// written, with its own setup and checks in one place, and shows a kind's
// failure as that test's subtest (go test -run 'TestMapSemantics/local').
// An environment variable read by start, with one test re-running the test
// binary per kind, would have left the tests unchanged but hidden which
// tests run where, cost a process start per kind, and kept the tests that
// use two devices or mixed kinds out of it.
//
// The fake GPUs are the fake CUDA driver's (internal/cudadrv/cudafake) in
// the cuda kind's emulate mode (cuda.UseEmulatedDriverForTests): a kernel
// without PTX — every kernel of these tests — runs its Go body on the host
// over copies of its arguments' device memory, in its stream's order, so
// what it sees and leaves is device memory that the runtime mapped and
// copied through the kind's staging buffers.
//
// The opencl devices are the machine's OpenCL driver's (PoCL in CI, a real
// driver: its queues, events and memory), in the kind's emulate mode
// (opencl.UseEmulationForTests) for kernels without OpenCL C, as the fake
// GPUs are.
//
// A test that cannot hold on some kind skips it with a t.Skip saying why,
// or leaves the kind out with a comment; it does not weaken what it checks.

// A testKind is a kind of device the matrix runs on.
type testKind struct {
	name  string // the subtest's name
	label string // what Info.Kind and errors call its devices: "device 0 (label)"
	// spec is the GOFFLOAD_DEVICES list of n devices of the kind.
	spec func(n int) string
	// setup, if not nil, makes the kind's devices openable for one test
	// (before Start; undone after Stop).
	setup func(t testing.TB)
	// inProcess: the kind's kernels run in this process (a fake GPU's
	// emulated ones too), so they can meet the test's channels.
	inProcess bool
	// serves is the kind a device process drives for each device (its
	// Info.Serves): empty where it serves its CPUs, or runs in this
	// process.
	serves string
}

// fakeGPUs is how many fake GPUs the cuda-fake kind's driver has: enough
// for the tests that use two devices.
const fakeGPUs = 2

// kinds are the kinds of the matrix, in the order their subtests run.
var kinds = []testKind{
	{name: "host", label: "host", inProcess: true, spec: func(n int) string { return fmt.Sprintf("host:%d", n) }},
	{name: "local", label: "local", spec: func(n int) string { return fmt.Sprintf("local:%d", n) }},
	{name: "cuda-fake", label: "cuda", spec: func(n int) string {
		if n == 1 {
			return "cuda:0"
		}
		return "cuda" // every GPU of the fake driver
	}, setup: useFakeGPUs, inProcess: true},
	{name: "opencl", label: "opencl", spec: func(n int) string {
		return strings.TrimSuffix(strings.Repeat("opencl:0,", n), ",") // PoCL has one device: n devices on it
	}, setup: useOpenCL, inProcess: true},
	{name: "local-opencl", label: "local", spec: func(n int) string {
		return fmt.Sprintf("local:%d[opencl]", n) // PoCL's device, served by n device processes
	}, setup: useProxiedOpenCL, serves: "opencl"},
	{name: "tcp", label: "tcp", spec: tcpSpec, setup: startTCPDevice},
	{name: "tcp-opencl", label: "tcp", spec: tcpSpec, setup: startTCPOpenCL, serves: "opencl"},
}

// tcpSpec is n sessions with the tcp device process the test started.
func tcpSpec(n int) string {
	return strings.TrimSuffix(strings.Repeat("tcp://"+tcpDeviceAddr+",", n), ",")
}

// startTCPOpenCL starts a tcp device process, as startTCPDevice does,
// that serves the machine's OpenCL device (PoCL in CI) in the emulate
// mode useOpenCL sets: each of the kind's n sessions is a proxied PoCL
// device, and the sessions are siblings in one process.
func startTCPOpenCL(t testing.TB) {
	t.Helper()
	opencltest.Need(t)
	startTCPDeviceWith(t, "GOFFLOAD_DEVICES=opencl", envEmulateOpenCL+"=1")
}

// useOpenCL makes the opencl kind's devices run the Go bodies of kernels
// without OpenCL C (every kernel of these tests but the declare target
// ones') over copies of device memory, in their queues' order, on the
// machine's OpenCL driver (PoCL in CI: scripts/test installs it), until
// the test ends. Without an OpenCL device the test skips, unless
// GOFFLOAD_REQUIRE_OPENCL is set.
func useOpenCL(t testing.TB) {
	t.Helper()
	opencltest.Need(t)
	t.Cleanup(opencl.UseEmulationForTests())
}

// envEmulateOpenCL, set to 1 in a device process of this test binary,
// makes its OpenCL devices emulate kernels without OpenCL C, as useOpenCL
// makes this process's.
const envEmulateOpenCL = "GOFFLOAD_TEST_OPENCL_EMULATION"

func init() {
	if os.Getenv(envEmulateOpenCL) == "1" {
		opencl.UseEmulationForTests()
	}
}

// useProxiedOpenCL makes the local device processes started in the test
// serve the machine's OpenCL device in the emulate mode useOpenCL sets.
func useProxiedOpenCL(t testing.TB) {
	t.Helper()
	opencltest.Need(t)
	t.Setenv(envEmulateOpenCL, "1")
}

// tcpDeviceAddr is where the tcp kind's device process serves, for the
// test that started it (startTCPDevice).
var tcpDeviceAddr string

// startTCPDevice starts a device process of this test binary serving
// tcp:// hosts on loopback, over protected sessions (TLS 1.3, the
// default), until the test ends; the kind's n devices are n sessions with
// it.
func startTCPDevice(t testing.TB) {
	t.Helper()
	startTCPDeviceWith(t, "GOFFLOAD_DEVICES=")
}

// startTCPDeviceWith is startTCPDevice with env added to the device
// process's environment.
func startTCPDeviceWith(t testing.TB, env ...string) {
	t.Helper()
	const secret = "matrix-s3cret-0123456789"
	t.Setenv("GOFFLOAD_SECRET", secret)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_DEVICE_CORES=2"), env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	a, sc, err := proctest.ServingAddr(pipe)
	if err != nil {
		t.Fatalf("the tcp device process: %v", err)
	}
	tcpDeviceAddr = a
	proctest.Relay(sc, "")
}

// matrixGPU is a fake GPU whose 2 multiprocessors are the cores the
// emulated kernels' loops split over.
var matrixGPU = cudafake.GPU{Name: "Fake GPU", Major: 8, Minor: 0, SMs: 2, Memory: 1 << 30}

// useFakeGPUs makes the cuda kind open the GPUs of a fresh fake driver, in
// the emulate mode, until the test ends.
func useFakeGPUs(t testing.TB) {
	gpus := make([]cudafake.GPU, fakeGPUs)
	for i := range gpus {
		gpus[i] = matrixGPU
	}
	t.Cleanup(cuda.UseEmulatedDriverForTests(cudafake.New(cudafake.Config{GPUs: gpus})))
}

// forEachKind runs body as one subtest per kind of the matrix (the MPI
// kinds alone inside TestMatrixMPI's job).
func forEachKind(t *testing.T, body func(t *testing.T, k testKind)) {
	t.Helper()
	for _, k := range matrixKinds() {
		t.Run(k.name, func(t *testing.T) {
			recordMPI(t)
			body(t, k)
		})
	}
}

// start starts the runtime on n devices of the kind (with opts after the
// device list) and stops it when the test ends. The devices are mandatory
// (OMP_TARGET_OFFLOAD=MANDATORY): a kind whose devices do not open fails
// the test instead of falling back to the initial device, which would pass
// every check without testing the kind; and every device must be of the
// kind.
func (k testKind) start(t testing.TB, n int, opts ...offload.Option) {
	t.Helper()
	if n > fakeGPUs {
		t.Fatalf("the matrix has %d devices of a kind at most, not %d", fakeGPUs, n)
	}
	if k.setup != nil {
		k.setup(t)
	}
	start(t, append([]offload.Option{offload.WithDevices(k.spec(n)), offload.WithOffload("MANDATORY")}, opts...)...)
	if got := offload.NumDevices(); got != n {
		t.Fatalf("%s: %d devices, want %d", k.spec(n), got, n)
	}
	for i := range n {
		if in, err := offload.On(i).Info(); err != nil || in.Kind != k.label || in.Serves != k.serves {
			t.Fatalf("%s: device %d is %+v, %v; want a %s device serving %q", k.spec(n), i, in, err, k.label, k.serves)
		}
	}
}

// needInProcess skips the test on a kind whose kernels run in another
// process: the test holds its kernels with channels of this process (a
// gate), which a device process's copy of the kernel cannot reach.
func (k testKind) needInProcess(t *testing.T) {
	t.Helper()
	if !k.inProcess {
		noteGated(t)
		t.Skipf("%s devices run kernels in another process, which the test's in-process gate cannot hold", k.name)
	}
}

// dev is how errors name device i of the kind: "device 0 (host)".
func (k testKind) dev(i int) string { return fmt.Sprintf("device %d (%s)", i, k.label) }

// startSet starts the runtime on a device list that may mix kinds (the
// dependency tests' deviceSets): a list that names cuda opens the fake
// GPUs. Its devices are mandatory, as in testKind.start.
func startSet(t testing.TB, devices string, opts ...offload.Option) {
	t.Helper()
	if strings.Contains(devices, "cuda") {
		useFakeGPUs(t)
	}
	if strings.Contains(devices, "opencl") {
		useOpenCL(t)
	}
	start(t, append([]offload.Option{offload.WithDevices(devices), offload.WithOffload("MANDATORY")}, opts...)...)
}
