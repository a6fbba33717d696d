package remote_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/remote"
)

// Device processes of other architectures (docs/remote.md, "Devices of
// other architectures"): this amd64 host serves tcp:// devices that are
// builds of the same code for arm64, riscv64 and ppc64le, run under
// qemu-user on loopback, and is refused by builds whose memory differs
// (arm, 32-bit, and s390x, big-endian, under qemu). Without qemu-user the
// tests skip, unless GOFFLOAD_REQUIRE_QEMU=1 (scripts/test installs it).

// qemuFor is the qemu-user emulator of each GOARCH the tests build for.
// The 32-bit device is arm, not 386: an amd64 kernel without IA32
// emulation cannot exec 386 programs, and qemu-i386 crashes Go's.
var qemuFor = map[string]string{
	"arm":     "qemu-arm",
	"arm64":   "qemu-aarch64",
	"riscv64": "qemu-riscv64",
	"ppc64le": "qemu-ppc64le",
	"s390x":   "qemu-s390x",
}

// archRunner returns the command prefix that runs a GOARCH=arch program
// here: qemu-user's emulator for arch.
// It skips t where this host is not amd64 or the emulator is missing; under
// GOFFLOAD_REQUIRE_QEMU=1 a missing emulator fails t instead.
func archRunner(t *testing.T, arch string) []string {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("the architecture tests run on an amd64 host, not %s", runtime.GOARCH)
	}
	if testing.Short() {
		t.Skip("-short: builds for other architectures and runs them under qemu-user")
	}
	q := qemuFor[arch]
	path, err := exec.LookPath(q)
	if err != nil {
		if os.Getenv("GOFFLOAD_REQUIRE_QEMU") == "1" {
			t.Fatalf("%s is missing (apt-get install -y qemu-user) and GOFFLOAD_REQUIRE_QEMU=1", q)
		}
		t.Skipf("%s is not installed (apt-get install -y qemu-user): no %s device process to serve", q, arch)
	}
	return []string{path}
}

// sysrootFor is where Debian's cross libc packages put each GOARCH's
// loader and libc (libc6-arm64-cross, libc6-riscv64-cross).
var sysrootFor = map[string]string{
	"arm64":   "/usr/aarch64-linux-gnu",
	"riscv64": "/usr/riscv64-linux-gnu",
}

// dynamicRunner is archRunner for a program linked dynamically (one that
// imports a GPU kind, through purego: this package's tests do, for the
// proxied OpenCL devices): qemu-user is told the target's sysroot. It
// skips t where the cross libc is missing, or fails it under
// GOFFLOAD_REQUIRE_QEMU=1.
func dynamicRunner(t *testing.T, arch string) []string {
	t.Helper()
	run := archRunner(t, arch)
	root := sysrootFor[arch]
	pkg := "libc6-" + map[string]string{"arm64": "arm64", "riscv64": "riscv64"}[arch] + "-cross"
	if _, err := os.Stat(filepath.Join(root, "lib")); err != nil {
		if os.Getenv("GOFFLOAD_REQUIRE_QEMU") == "1" {
			t.Fatalf("the %s loader and libc are missing (apt-get install -y %s) and GOFFLOAD_REQUIRE_QEMU=1", arch, pkg)
		}
		t.Skipf("the %s loader and libc are not installed (apt-get install -y %s): %v", arch, pkg, err)
	}
	return append(run, "-L", root)
}

// staticTags leave out the GPU kinds, so that a CGO_ENABLED=0 build links
// statically and runs under qemu-user without the target's libc.
const staticTags = "goffload_nocuda,goffload_noopencl"

// crossBuild runs go with args for GOARCH=arch (CGO_ENABLED=0, so a
// static binary unless the GPU kinds' purego links the loader in).
func crossBuild(t *testing.T, arch string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(goRoot(t), "bin", "go"), args...)
	cmd.Env = append(os.Environ(), "GOARCH="+arch, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=%s go %s: %v\n%s", arch, strings.Join(args, " "), err, out)
	}
}

// startDeviceCmd starts argv as a TCP device process on loopback that
// proves secret, until the test ends, and returns its address.
func startDeviceCmd(t *testing.T, secret string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_SECRET="+secret, "GOFFLOAD_DEVICE_CORES=2", "GOFFLOAD_DEVICES=")
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
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	proctest.Relay(sc, "") // its later lines (a refused host)
	return a
}

// TestArchConformance: the conformance suite on two sessions with a device
// process that is this package's tests built for arm64 (and riscv64),
// under qemu-user: the same kernel table, scalars, slices, panics, events
// and errors, from a process of another architecture.
func TestArchConformance(t *testing.T) {
	for _, arch := range []string{"arm64", "riscv64"} {
		t.Run(arch, func(t *testing.T) {
			run := dynamicRunner(t, arch)
			test := filepath.Join(t.TempDir(), "remote.test-"+arch)
			args := []string{"test", "-c", "-o", test}
			if arch == "riscv64" {
				// Go names /lib/ld.so.1 as riscv64's loader; Debian's cross libc has it under its ABI's name.
				args = append(args, "-ldflags=-I=/lib/ld-linux-riscv64-lp64d.so.1")
			}
			crossBuild(t, arch, append(args, ".")...)
			const secret = "arch-conformance-s3cret"
			addr := startDeviceCmd(t, secret, append(run, test, "-test.run=^$")...)
			t.Setenv("GOFFLOAD_SECRET", secret)
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("tcp")
				var devs []plugin.Device
				for range 2 {
					d, err := k.Open(addr)
					if err != nil {
						t.Fatal(err)
					}
					devs = append(devs, d...)
				}
				return devs
			})
		})
	}
}

// archCheck builds testdata/archcheck for this host (the default build)
// and returns its path.
func archCheck(t *testing.T, dir string) string {
	t.Helper()
	host := filepath.Join(dir, "archcheck")
	cmd := exec.Command(filepath.Join(goRoot(t), "bin", "go"), "build", "-o", host, "./testdata/archcheck")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/archcheck: %v\n%s", err, out)
	}
	return host
}

// runHost runs the host program prog with GOFFLOAD_DEVICES=devices.
func runHost(t *testing.T, secret, devices, prog string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), "GOFFLOAD_SECRET="+secret, "GOFFLOAD_DEVICES="+devices, "OMP_TARGET_OFFLOAD=MANDATORY")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var fusedRE = regexp.MustCompile(`verified; (\d+) of (\d+) multiply-adds fused`)

// TestArchValues: every kind of scalar argument, a padded struct, a struct
// parameter holding slices, slices of structs and declare target
// variables (to and link) cross between this amd64 host and device
// processes built for arm64 and riscv64 (testdata/archcheck
// checks each against the host's own). Those architectures fuse x*y+z
// into one rounding, as the Go spec allows, so some results differ from
// the host's; float64(x*y)+z matches bit for bit (docs/remote.md).
func TestArchValues(t *testing.T) {
	dir := t.TempDir()
	var host string
	for _, arch := range []string{"arm64", "riscv64"} {
		t.Run(arch, func(t *testing.T) {
			run := archRunner(t, arch)
			if host == "" {
				host = archCheck(t, dir)
			}
			dev := filepath.Join(dir, "archcheck-"+arch)
			crossBuild(t, arch, "build", "-tags", staticTags, "-o", dev, "./testdata/archcheck")
			const secret = "arch-values-s3cret-0123"
			addr := startDeviceCmd(t, secret, append(run, dev)...)
			out, err := runHost(t, secret, "tcp://"+addr+",tcp://"+addr, host)
			m := fusedRE.FindStringSubmatch(out)
			if err != nil || m == nil || !strings.Contains(out, "on 2 device(s)") {
				t.Fatalf("%v\n%s", err, out)
			}
			if n, _ := strconv.Atoi(m[1]); n == 0 {
				t.Errorf("%s fused none of the multiply-adds: docs/remote.md says it does\n%s", arch, out)
			}
			t.Logf("%s", strings.TrimSpace(out))
		})
	}
}

// TestArchRefused: device processes whose memory is laid out otherwise
// are refused at hello, with an error that names the kernel, the
// parameter and the type: an arm build (32-bit: int is 4 bytes) and an s390x one
// (big-endian). Nothing runs on them.
func TestArchRefused(t *testing.T) {
	dir := t.TempDir()
	var host string
	for _, c := range []struct {
		arch string
		want []string
	}{
		{"arm", []string{
			"the device (arm: 32-bit, little-endian)",
			`kernel "archcheck.scalars", its int parameter: int is 8 bytes on the host (amd64), 4 on the device (arm)`,
		}},
		{"s390x", []string{
			"the device (s390x: 64-bit, big-endian)",
			`kernel "archcheck.scalars", its []main.Mixed parameter: main.Mixed.I16 (int16) is little-endian (amd64) on the host and big-endian (s390x) on the device`,
			`kernel "archcheck.attach", field Xs (offload.In[float64]) of its main.Attach parameter: float64 is little-endian`,
		}},
	} {
		t.Run(c.arch, func(t *testing.T) {
			run := archRunner(t, c.arch)
			if host == "" {
				host = archCheck(t, dir)
			}
			dev := filepath.Join(dir, "archcheck-"+c.arch)
			crossBuild(t, c.arch, "build", "-tags", staticTags, "-o", dev, "./testdata/archcheck")
			const secret = "arch-refused-s3cret-0123"
			addr := startDeviceCmd(t, secret, append(run, dev)...)
			out, err := runHost(t, secret, "tcp://"+addr, host)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || strings.Contains(out, "verified") {
				t.Fatalf("the host ran on a %s device: %v\n%s", c.arch, err, out)
			}
			for _, w := range append(c.want, "tcp://"+addr, remote.ErrMismatch.Error(), "lay out memory differently") {
				if !strings.Contains(out, w) {
					t.Errorf("the host's error does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestArchExample: examples/saxpy with its two parts on a device process
// built for arm64 (static, without the GPU kinds; and the default build,
// which links the GPU kinds through purego and so needs the arm64 loader
// and libc: Debian's libc6-arm64-cross, given to qemu with -L) and for
// riscv64.
func TestArchExample(t *testing.T) {
	dir := t.TempDir()
	var host string
	for _, c := range []struct{ name, arch, tags, sysroot string }{
		{"arm64", "arm64", staticTags, ""},
		{"arm64-default", "arm64", "", "/usr/aarch64-linux-gnu"},
		{"riscv64", "riscv64", staticTags, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := archRunner(t, c.arch)
			if c.sysroot != "" {
				if _, err := os.Stat(filepath.Join(c.sysroot, "lib", "ld-linux-aarch64.so.1")); err != nil {
					if os.Getenv("GOFFLOAD_REQUIRE_QEMU") == "1" {
						t.Fatalf("the arm64 loader is missing (apt-get install -y libc6-arm64-cross) and GOFFLOAD_REQUIRE_QEMU=1: %v", err)
					}
					t.Skipf("the arm64 loader is not installed (apt-get install -y libc6-arm64-cross): %v", err)
				}
				run = append(run, "-L", c.sysroot)
			}
			if host == "" {
				host = filepath.Join(dir, "saxpy")
				cmd := exec.Command(filepath.Join(goRoot(t), "bin", "go"), "build", "-o", host, "../../examples/saxpy")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go build examples/saxpy: %v\n%s", err, out)
				}
			}
			dev := filepath.Join(dir, "saxpy-"+c.name)
			args := []string{"build", "-o", dev}
			if c.tags != "" {
				args = append(args, "-tags", c.tags)
			}
			crossBuild(t, c.arch, append(args, "../../examples/saxpy")...)
			const secret = "arch-saxpy-s3cret-01234"
			addr := startDeviceCmd(t, secret, append(run, dev)...)
			out, err := runHost(t, secret, "tcp://"+addr+",tcp://"+addr, host, "-n", "300000")
			if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "(tcp, ") {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s", strings.TrimSpace(out))
		})
	}
}
