package main

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/ptxgen"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/role"
)

// The remote suite starts this test binary again, as a local device process
// and as the raw baselines' peer: those serve instead of running the tests.
func TestMain(m *testing.M) {
	servePeerRole()
	role.ServeDevice()
	// Device processes built with -race would sleep a second before
	// exiting at every Stop; they inherit this.
	if !strings.Contains(os.Getenv("GORACE"), "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	// Suite host's stencil, 512² × 100, takes seconds under -race: the
	// suite's tests run 4 iterations of it.
	hostStencilIters = 4
	// Suites host2 and host_shared copy 200 MiB and look up in 192 MiB:
	// small sizes here.
	hostEnterBytes, hostLookupGrid, hostLookupBatch = 4<<20, 1<<12, 1<<14
	code := m.Run()
	removeAllRun()
	os.Exit(code)
}

// TestHostSuiteTSV checks suite host's part of the shared -suite all run:
// every metric comes out as one well-formed tsv line.
func TestHostSuiteTSV(t *testing.T) {
	want := beyondWant("host.")
	maps.Copy(want, map[string]bool{ // metric -> has a baseline
		"host.empty_region":              false,
		"host.map_tofrom_64MiB":          true,
		"host.present_region_64MiB":      false,
		"host.lookup_1e5":                false,
		"host.stencil_512_vs_goroutines": true,
	})
	checkSection(t, "host", want)
}

// TestHostMemorySuitesTSV checks suites host2 and host_shared (host:2 with
// memory of each device's own, and sharing the program's) in the shared run.
func TestHostMemorySuitesTSV(t *testing.T) {
	checkSection(t, "host2", map[string]bool{"host2.enter_200MiB_two_vs_one": true})
	checkSection(t, "host_shared", map[string]bool{"host_shared.lookup_vs_goroutines": true})
}

// beyondWant is the launch_beyond_kernel_* metrics of prefix, one per
// kernel length.
func beyondWant(prefix string) map[string]bool {
	want := map[string]bool{}
	for _, d := range beyondKernelLengths {
		want[prefix+"launch_beyond_kernel_"+beyondName(d)] = true
	}
	return want
}

// TestRemoteSuiteTSV checks suite remote in the shared run. Its device
// process and raw peers are this test binary started again: the local
// device on shared memory, and so the spinning raw baselines.
func TestRemoteSuiteTSV(t *testing.T) {
	if len(spins) != 3 {
		t.Errorf("%d spins, want 3 (raw.pingpong_*)", len(spins))
	}
	// The suite's own sweep; the shared run's is shorter.
	full := remoteWant("remote.")
	for _, m := range []string{"remote.submit_8B", "remote.submit_4KiB", "remote.retrieve_1MiB", "remote.submit_64MiB", "remote.submit_64MiB_vs_copy", "remote.retrieve_64MiB_vs_copy"} {
		if !full[m] {
			t.Errorf("the suite has no %s", m)
		}
	}
	defer func(sizes []int64) { sweepSizes = sizes }(sweepSizes)
	sweepSizes = allSweepSizes
	out := checkSection(t, "remote", remoteWant("remote."))
	for _, line := range []string{
		"\n# remote.launch_rtt_vs_spin, remote.submit_SIZE, remote.retrieve_SIZE: raw baselines over a shared-memory ring pair, ",
		"\nremote.submit_64MiB_vs_copy\t",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// TestRemoteSocketSuiteTSV checks suite remote-socket in the shared run:
// the local device's link and every raw baseline on sockets, the suite's
// environment set for Start and restored after.
func TestRemoteSocketSuiteTSV(t *testing.T) {
	defer func(sizes []int64) { sweepSizes = sizes }(sweepSizes)
	sweepSizes = allSweepSizes
	out := checkSection(t, "remote-socket", remoteWant("remote_socket."))
	old, had := allRun.localLink, allRun.hadLocalLink
	for _, line := range []string{
		"# suite remote-socket: devices \"local:1\", 1 device(s), with GOFFLOAD_LOCAL_LINK=socket\n",
		"\n# remote_socket.*: every raw baseline goes over the socket",
		"\nremote_socket.retrieve_64MiB_vs_copy\t",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q", line)
		}
	}
	if now, has := os.LookupEnv(envLocalLink); now != old || has != had {
		t.Errorf("after the suite %s=%q (set: %v), want %q (set: %v)", envLocalLink, now, has, old, had)
	}
}

// remoteWant is the metrics suite remote (prefix "remote.") or
// remote-socket ("remote_socket.") reports: the launch figures, a submit
// and a retrieve per size of sweepSizes, the 64 MiB copies against Go's
// copy, and suite remote's raw ping-pongs.
func remoteWant(prefix string) map[string]bool {
	want := map[string]bool{
		prefix + "launch_rtt":             true,
		prefix + "launch_rtt_vs_spin":     true,
		prefix + "submit_64MiB_vs_copy":   true,
		prefix + "retrieve_64MiB_vs_copy": true,
	}
	for m := range beyondWant(prefix) {
		want[m] = true
	}
	if prefix == "remote." {
		for _, sp := range spins {
			want[spinMetric(sp)] = true
		}
	}
	for _, size := range sweepSizes {
		want[prefix+"submit_"+sizeName(size)] = true
		want[prefix+"retrieve_"+sizeName(size)] = true
	}
	return want
}

// TestSuiteAll: -suite all runs the suites that can run here and says why
// it skips the rest (mpi, without MPI support in this test binary); naming
// a suite that cannot run is an error that says why. The other suites'
// tests check their sections of the same run.
func TestSuiteAll(t *testing.T) {
	out := suiteAll(t)
	for _, want := range []string{"# suite mpi skipped: ", "\nhost.empty_region\t", "\nremote.launch_rtt\t", "\nremote.submit_4KiB\t", "\nremote.retrieve_1MiB\t", "\nremote_socket.launch_rtt\t", "\nremote_socket.submit_64MiB_vs_copy\t", "\nasync.chain_per_op\t", "\napps.jacobi_2dev_vs_1dev\t", "\n# taskbench.stencil_1d.host2 sweep ",
		"\n# plot remote_latency.png: wrote ", "\n# plot remote_socket_bandwidth.png: wrote ", "\n# plot peer_ratios.png: not written, suite peer skipped: left to TestPeerSuiteTSV\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("-suite all output lacks %q:\n%s", want, out)
		}
	}
	defer func(dpi int) { plotDPI = dpi }(plotDPI)
	plotDPI = allPlotDPI
	dir := allRun.dir
	checkPNGs(t, dir, "remote_latency.png", "remote_bandwidth.png", "remote_socket_latency.png", "remote_socket_bandwidth.png", "apps_ratios.png")
	if _, err := os.Stat(filepath.Join(dir, "peer_ratios.png")); !os.IsNotExist(err) {
		t.Errorf("peer_ratios.png of the skipped suite peer: %v, want none", err)
	}
	var o, errOut bytes.Buffer
	err := run([]string{"-suite", "mpi"}, &o, &errOut)
	if err == nil || !strings.Contains(err.Error(), "cannot run here") || !strings.Contains(err.Error(), "mpirun") {
		t.Errorf("-suite mpi outside an MPI job: %v; want an error saying how to run it", err)
	}
}

// TestPeerSuiteTSV runs suite peer where LLVM 22 is installed
// (scripts/install-peer; not in CI, which lacks the 1 GB of packages and
// checks only that -suite all skips it with its reason).
func TestPeerSuiteTSV(t *testing.T) {
	if why := skipReason("peer", suites["peer"]); why != "" {
		t.Skip(why)
	}
	// The workloads that move 64 MiB cost LLVM seconds each: left out here.
	all := peerWorkloads
	defer func() { peerWorkloads = all }()
	peerWorkloads = nil
	for _, w := range all {
		if !strings.Contains(w.name, "64Mi") {
			peerWorkloads = append(peerWorkloads, w)
		}
	}
	checkSuiteTSV(t, "peer", map[string]bool{
		"peer.empty_region": true,
		"peer.saxpy_1Mi":    true,
		"peer.stencil_512":  true,
	})
}

// TestAppsSuiteTSV checks suite apps (tiny sizes) in the shared run; its rows of devices of
// unequal speed come out where a cgroup can hold a device to part of a
// CPU, and say why not elsewhere.
func TestAppsSuiteTSV(t *testing.T) {
	want := map[string]bool{
		"apps.jacobi_2dev_vs_1dev":                true,
		"apps.jacobi_2dev_vs_goroutines":          true,
		"apps.jacobi_2dev_recorded_vs_goroutines": true,
		"apps.jacobi_2dev_recorded_vs_unrecorded": true,
		"apps.jacobi_any_vs_hand":                 true,
		"apps.cholesky_vs_goroutines":             true,
		"apps.cholesky_any_vs_hand":               true,
		"apps.cholesky_any_killed_vs_clean":       true,
		"apps.cholesky_any_stopped_vs_clean":      true,
		"apps.cg_local1_vs_host":                  true,
		"apps.cg_local1_recorded_vs_host":         true,
		"apps.cg_local1_recorded_vs_unrecorded":   true,
	}
	why := cpuLimitable(t)
	if why == "" {
		want["apps.cholesky_uneven_any_vs_rr"] = true
		want["apps.cholesky_uneven_any_vs_hand"] = true
	}
	out := checkSection(t, "apps", want)
	if why != "" && !strings.Contains(out, "# apps.cholesky_uneven_*: left out: ") {
		t.Errorf("without CPU limits (%s), the output does not say the rows of unequal speeds are left out", why)
	}
}

// TestAsyncSuiteTSV checks suite async in the shared run. Its device
// processes and raw peer are this test binary started again. The suite
// checks the compute kernel's results against the host's itself.
func TestAsyncSuiteTSV(t *testing.T) {
	checkSection(t, "async", map[string]bool{
		"async.chain_per_op":          true,
		"async.cross_device_per_op":   true,
		"async.two_devices":           true,
		"async.two_devices_vs_2cores": true,
		"remote.nowait_tasks":         true,
		"remote.stop_after_16k_tasks": true,
	})
}

// restoreAppsSizes returns what puts the apps suite's sizes back as they
// are now (flags of a run change them): defer restoreAppsSizes()().
func restoreAppsSizes() func() {
	n, iters, tiles, b, cgN, cgIters, fault := appsN, appsIters, appsTiles, appsB, appsCGN, appsCGIters, appsFaultTimeout
	return func() {
		appsN, appsIters, appsTiles, appsB, appsCGN, appsCGIters, appsFaultTimeout = n, iters, tiles, b, cgN, cgIters, fault
	}
}

// TestAsyncComputeRestores: the compute figures restart the runtime with
// other devices; afterwards the suite's own devices must be back, as
// runSuite started them.
func TestAsyncComputeRestores(t *testing.T) {
	if err := offload.Start(offload.WithDevices(asyncDevices), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	var out bytes.Buffer
	env := &Env{Budget: time.Millisecond, Rounds: 1, out: tsvPrinter{w: &out}}
	if err := asyncCompute(env); err != nil {
		t.Fatalf("asyncCompute: %v\noutput:\n%s", err, out.String())
	}
	if n := offload.NumDevices(); n != 2 {
		t.Fatalf("%d devices after asyncCompute, want the 2 of %q", n, asyncDevices)
	}
	for d := range 2 {
		info, err := offload.On(d).Info()
		if err != nil {
			t.Fatal(err)
		}
		if want := max(1, runtime.NumCPU()/2); info.Kind != "local" || (os.Getenv("GOFFLOAD_DEVICE_CORES") == "" && info.Cores != want) {
			t.Errorf("device %d after asyncCompute: %s device with %d cores, want a local device with %d", d, info.Kind, info.Cores, want)
		}
		if err := offload.On(d).Run(benchEmpty); err != nil {
			t.Errorf("device %d after asyncCompute: %v", d, err)
		}
	}
}

// TestComputeElem: the compute kernel's element function keeps its point
// on the unit circle's scale (no overflow or underflow whatever the
// iteration count) and does depend on the iterations.
func TestComputeElem(t *testing.T) {
	for _, x := range []float64{-0.5, 0, 0.25, 0.499} {
		r0 := math.Hypot(x, 1)
		for _, n := range []int{0, 1, computeIters, 1 << 20} {
			v := computeElem(x, n)
			if math.IsNaN(v) || math.Abs(v) > 2*r0 {
				t.Errorf("computeElem(%v, %d) = %v, want at most %v in magnitude", x, n, v, 2*r0)
			}
		}
		if computeElem(x, computeIters) == computeElem(x, computeIters+1) {
			t.Errorf("computeElem(%v, n) does not depend on n", x)
		}
	}
}

// checkSuiteTSV runs a suite with a tiny time budget and checks its output
// as checkTSV does. It returns the output.
func checkSuiteTSV(t *testing.T, suite string, want map[string]bool, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(append([]string{"-suite", suite, "-format", "tsv", "-time", "10ms", "-rounds", "1"}, args...), &out, &errOut); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s\nstdout:\n%s", err, errOut.String(), out.String())
	}
	return checkTSV(t, out.String(), want)
}

// checkSection checks suite's section of the shared -suite all run as
// checkTSV does. It returns the section.
func checkSection(t *testing.T, suite string, want map[string]bool) string {
	t.Helper()
	return checkTSV(t, suiteSection(t, suite), want)
}

// checkTSV checks that every metric of want (metric -> has a baseline)
// comes out of out as one well-formed tsv line, and nothing else does. It
// returns out.
func checkTSV(t *testing.T, out string, want map[string]bool) string {
	t.Helper()
	t.Logf("output:\n%s", out)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Errorf("line %q: %d tab-separated fields, want 4", line, len(f))
			continue
		}
		metric := f[0]
		hasBase, ok := want[metric]
		if !ok {
			t.Errorf("line %q: unexpected metric %q", line, metric)
			continue
		}
		if seen[metric] {
			t.Errorf("metric %s reported twice", metric)
		}
		seen[metric] = true
		if v, err := strconv.ParseFloat(f[1], 64); err != nil || !(v > 0) {
			t.Errorf("%s: goffload time %q: want a positive number", metric, f[1])
		}
		if !hasBase {
			if f[2] != "-" || f[3] != "-" {
				t.Errorf("%s: baseline %q, ratio %q: want - and -", metric, f[2], f[3])
			}
			continue
		}
		base, err := strconv.ParseFloat(f[2], 64)
		if err != nil || !(base > 0) {
			t.Errorf("%s: baseline time %q: want a positive number", metric, f[2])
			continue
		}
		ratio, err := strconv.ParseFloat(f[3], 64)
		if err != nil || !(ratio > 0) {
			t.Errorf("%s: ratio %q: want a positive number", metric, f[3])
			continue
		}
		if i := strings.IndexByte(f[3], '.'); i < 0 || len(f[3])-i-1 != 3 {
			t.Errorf("%s: ratio %q: want 3 decimals", metric, f[3])
		}
		goff, _ := strconv.ParseFloat(f[1], 64)
		if got := goff / base; got < ratio*0.99-0.001 || got > ratio*1.01+0.001 {
			t.Errorf("%s: ratio %s, but goffload/baseline = %.3f", metric, f[3], got)
		}
	}
	for m := range want {
		if !seen[m] {
			t.Errorf("metric %s missing from the output", m)
		}
	}
	return out
}

// TestPeers starts this test binary as the raw baselines' peers, in both
// roles, reading plainly and spinning, and checks what they answer and that
// they exit cleanly at the end of the stream.
func TestPeers(t *testing.T) {
	for _, sp := range []spin{{}, {budget: 50 * time.Microsecond}} {
		p, err := startPeer("echo", sp, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.pingPong(1000); err != nil {
			t.Errorf("echo peer, spin %v: %v", sp, err)
		}
		if err := p.close(); err != nil {
			t.Errorf("echo peer, spin %v: %v", sp, err)
		}
		if reads, _ := p.r.stats(); sp.budget > 0 && reads < 1000 {
			t.Errorf("spinning reader: %d reads for 1000 echoes", reads)
		}

		const size = 3<<20 + 5
		p, err = startPeer("xfer", sp, size)
		if err != nil {
			t.Fatal(err)
		}
		msg := fill(make([]byte, size))
		if err := p.send(msg, 3); err != nil {
			t.Errorf("xfer peer, spin %v: %v", sp, err)
		}
		msg[size-1]++
		if err := p.send(msg, 1); err != nil {
			t.Errorf("xfer peer, spin %v, changed message: %v", sp, err)
		}
		// Batches of other sizes and directions, one after the other.
		for _, n := range []int{1, 8, 4096, size} {
			if err := p.send(msg[:n], 2); err != nil {
				t.Errorf("xfer peer, spin %v, %d-byte sink batch: %v", sp, n, err)
			}
			back := make([]byte, n)
			if err := p.fetch(back, msg[:n], 2); err != nil {
				t.Errorf("xfer peer, spin %v, %d-byte source batch: %v", sp, n, err)
			} else if n == size && !bytes.Equal(back, msg) {
				t.Errorf("xfer peer, spin %v: the %d bytes fetched differ from those sent", sp, n)
			}
		}
		if err := p.close(); err != nil {
			t.Errorf("xfer peer, spin %v: %v", sp, err)
		}
	}

	// A peer that is given a message cut short, or a batch bigger than its
	// buffer, fails, and says so.
	for _, c := range []struct {
		what string
		f    func(p *peer) error
	}{
		{"10 of 100 bytes", func(p *peer) error {
			if err := p.batch(xferSink, 100, 1); err != nil {
				return err
			}
			_, err := p.w.Write(make([]byte, 10))
			return err
		}},
		{"a batch of 101-byte messages", func(p *peer) error { return p.batch(xferSource, 101, 1) }},
	} {
		p, err := startPeer("xfer", spin{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.f(p); err != nil {
			t.Fatal(err)
		}
		if err := p.close(); err == nil {
			t.Errorf("xfer peer given %s exited cleanly, want a failure", c.what)
		}
	}
}

// TestTableUnits checks the table's time formatting.
func TestTableUnits(t *testing.T) {
	for _, c := range []struct {
		ns   float64
		want string
	}{
		{12.34, "12.3 ns"},
		{999, "999 ns"},
		{2414, "2.41 µs"},
		{45_800, "45.8 µs"},
		{6_559_629, "6.56 ms"},
		{1.5e9, "1.50 s"},
	} {
		if got := human(c.ns); got != c.want {
			t.Errorf("human(%v) = %q, want %q", c.ns, got, c.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	defer restoreAppsSizes()()
	for _, args := range [][]string{
		{"-suite", "nosuch"},
		{"-format", "xml"},
		{"-time", "0s"},
		{"-rounds", "0"},
		{"-suite", ","},
		{"extra"},
		{"-suite", "remote", "-devices", "tcp://127.0.0.1:1"}, // no -peer
		{"-suite", "host", "-devices", "local:1"},             // no Remote suite
		{"-suite", "async", "-peer", "no-port"},
		{"-serve-peer", "127.0.0.1:-1"},
		{"-apps-cg-n", "0"},
	} {
		var out, errOut bytes.Buffer
		if err := run(args, &out, &errOut); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

// TestSpinEnv: what a peer is told in its environment reads back the same,
// and nonsense is refused.
func TestSpinEnv(t *testing.T) {
	for _, sp := range append([]spin{{}}, spins...) {
		got, err := parseSpin(sp.String())
		if err != nil || got != sp {
			t.Errorf("parseSpin(%q) = %v, %v; want %v", sp.String(), got, err, sp)
		}
	}
	for _, v := range []string{"fast", "-1us", "20us+", "+yield", "20us+yield"} {
		if _, err := parseSpin(v); err == nil {
			t.Errorf("parseSpin(%q) succeeded, want an error", v)
		}
	}
}

// TestCUDASuiteTSV runs suite cuda on a fake GPU (internal/cudadrv/cudafake,
// with no kernel code: the empty kernel does nothing): the suite's code
// paths and output, not GPU figures.
func TestCUDASuiteTSV(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 16 MiB buffers")
	}
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{{Name: "Fake GPU", Major: 9, SMs: 4, Memory: 1 << 30}}})
	defer cuda.UseDriverForTests(drv)()
	defer func(n int64) { cudaCopyBytes = n }(cudaCopyBytes)
	cudaCopyBytes = 16 << 20 // 256 MiB copies of a fake GPU take seconds under -race
	checkSuiteTSV(t, "cuda", map[string]bool{"cuda.empty_launch": true, "cuda.submit_16MiB": true, "cuda.submit_16MiB_pageable": true, "cuda.retrieve_16MiB": true, "cuda.retrieve_16MiB_pageable": true})
	if drv.Launches("empty") == 0 {
		t.Error("the fake GPU launched no empty kernel")
	}
}

// TestCUDASuiteSkipsWithoutDriver: with no driver the suite is skipped,
// saying why.
func TestCUDASuiteSkipsWithoutDriver(t *testing.T) {
	t.Setenv(cuda.LibraryEnv, "/nonexistent/libcuda.so.1")
	if why := skipReason("cuda", suites["cuda"]); !strings.Contains(why, "no NVIDIA driver (/nonexistent/libcuda.so.1 not found)") {
		t.Errorf("skip reason %q", why)
	}
	var out, errOut bytes.Buffer
	err := run([]string{"-suite", "cuda"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "suite cuda cannot run here: no NVIDIA driver") {
		t.Errorf("-suite cuda without a driver: %v", err)
	}
}

// TestCudaPTXGenerated: cuda.ptx is what go generate makes of cuda.cu,
// where clang with the NVPTX target is installed.
func TestCudaPTXGenerated(t *testing.T) {
	ptxgen.UpToDate(t, "cuda.go")
}

// TestRemoteSuiteTCP measures as between two machines, on 127.0.0.1: suite
// remote against a TCP device (this test binary started as one) with -peer
// naming a raw peer server (servePeersTCP, as bench -serve-peer runs it, in
// this process).
func TestRemoteSuiteTCP(t *testing.T) {
	t.Setenv("GOFFLOAD_SECRET", "bench-test-secret")
	devAddr := startTCPDevice(t)
	peerAddr := startPeerServer(t)
	defer func(sizes []int64) { sweepSizes = sizes }(sweepSizes)
	sweepSizes = []int64{8, 4 << 10}
	out := checkSuiteTSV(t, "remote", remoteWant("remote."), "-devices", "tcp://"+devAddr, "-peer", peerAddr)
	for _, line := range []string{
		"# remote.*: every raw baseline goes over TCP",
		fmt.Sprintf("# suite remote: devices %q (-devices, instead of the suite's \"local:1\"), 1 device(s)\n", "tcp://"+devAddr),
		"# suite remote: raw baselines' peer: bench -serve-peer at " + peerAddr + ", over TCP",
		"# device 0: tcp (",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q", line)
		}
	}
	// Suite remote-socket measures local devices' socket fallback only.
	out = checkSuiteTSV(t, "remote-socket", nil, "-devices", "tcp://"+devAddr, "-peer", peerAddr)
	if line := "\n# suite remote-socket: not measured: "; !strings.Contains(out, line) {
		t.Errorf("remote-socket on a tcp device: output lacks %q", line)
	}
}

// TestTCPTLSSuiteTSV checks suite tcp-tls in the shared run. Its TCP
// devices and raw TLS peers are this test binary started again.
func TestTCPTLSSuiteTSV(t *testing.T) {
	out := checkSection(t, "tcp-tls", map[string]bool{
		"tcp_tls.launch_vs_tls":           true,
		"tcp_tls.submit_64MiB_vs_tls":     true,
		"tcp_tls.retrieve_64MiB_vs_tls":   true,
		"tcp_tls.launch_vs_plain":         true,
		"tcp_tls.submit_64MiB_vs_plain":   true,
		"tcp_tls.retrieve_64MiB_vs_plain": true,
		"tcp_tls.raw_tls_vs_tcp_pingpong": true,
		"tcp_tls.plain_launch_vs_tcp":     true,
	})
	if !strings.Contains(out, "\n# tcp-tls: TCP devices on 127.0.0.1 (protected: ") {
		t.Errorf("output lacks the devices' comment:\n%s", out)
	}
}

// TestProxySuiteTSV: suite proxy reports its three figures, where the
// machine has an OpenCL driver (PoCL in CI).
func TestProxySuiteTSV(t *testing.T) {
	if why := suites["proxy"].Skip(); why != "" {
		t.Skip(why)
	}
	checkSection(t, "proxy", map[string]bool{"proxy.empty_launch": true, "proxy.submit_64MiB": true, "proxy.retrieve_64MiB": true})
	checkSection(t, "proxy2", map[string]bool{"proxy2.jacobi_2048": true})
}
