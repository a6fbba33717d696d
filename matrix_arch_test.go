//go:build linux

package offload_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/goffload/offload/internal/proctest"
)

// The matrix's tcp-arm64 kind: a tcp:// device process that is this test
// binary built for arm64, run under qemu-user on loopback (docs/remote.md,
// "Devices of other architectures"). It is the default build (the GPU
// kinds linked through purego), so qemu gets the arm64 loader and libc of
// Debian's libc6-arm64-cross (-L). One device process serves every test's
// sessions, as a TCP device serves many hosts: starting one under qemu
// takes most of a second. Without qemu-user the kind skips, unless
// GOFFLOAD_REQUIRE_QEMU=1 (scripts/test installs it).
func init() {
	kinds = append(kinds, testKind{name: "tcp-arm64", label: "tcp", spec: func(n int) string {
		return strings.TrimSuffix(strings.Repeat("tcp://"+arm64Device.addr+",", n), ",")
	}, setup: useArm64Device})
}

const arm64Sysroot = "/usr/aarch64-linux-gnu"

var arm64Device struct {
	once sync.Once
	addr string
	skip string // why the kind cannot run here
	err  error
}

const arm64Secret = "matrix-arm64-s3cret-0123"

// useArm64Device makes the tcp-arm64 kind's device process serve (the
// first test starts it), and gives the test its secret.
func useArm64Device(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the tcp-arm64 kind builds this test binary for arm64 and runs it under qemu-user")
	}
	arm64Device.once.Do(startArm64Device)
	if arm64Device.skip != "" {
		if os.Getenv("GOFFLOAD_REQUIRE_QEMU") == "1" {
			t.Fatalf("%s, and GOFFLOAD_REQUIRE_QEMU=1", arm64Device.skip)
		}
		t.Skip(arm64Device.skip)
	}
	if arm64Device.err != nil {
		t.Fatal(arm64Device.err)
	}
	t.Setenv("GOFFLOAD_SECRET", arm64Secret)
}

func startArm64Device() {
	d := &arm64Device
	if runtime.GOARCH != "amd64" {
		d.skip = "the tcp-arm64 kind runs on an amd64 host, not " + runtime.GOARCH
		return
	}
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		d.skip = "qemu-aarch64 is not installed (apt-get install -y qemu-user)"
		return
	}
	if _, err := os.Stat(filepath.Join(arm64Sysroot, "lib", "ld-linux-aarch64.so.1")); err != nil {
		d.skip = "the arm64 loader is not installed (apt-get install -y libc6-arm64-cross)"
		return
	}
	dir, err := os.MkdirTemp("", "goffload-arm64-")
	if err != nil {
		d.err = err
		return
	}
	defer os.RemoveAll(dir) // the running process keeps its file
	exe := filepath.Join(dir, "offload.test")
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		d.err = err
		return
	}
	build := exec.Command(goBin, "test", "-c", "-o", exe, ".")
	build.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		d.err = fmt.Errorf("GOARCH=arm64 go test -c: %v\n%s", err, out)
		return
	}
	cmd := exec.Command(qemu, "-L", arm64Sysroot, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_SECRET="+arm64Secret, "GOFFLOAD_DEVICE_CORES=2", "GOFFLOAD_DEVICES=")
	// It serves until this test binary ends: the kernel kills it then.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		d.err = err
		return
	}
	// Pdeathsig follows the thread that started the process: this one
	// stays locked to it, and the thread lives as long as the binary.
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		started <- cmd.Start()
		select {}
	}()
	if err := <-started; err != nil {
		d.err = err
		return
	}
	a, sc, err := proctest.ServingAddr(pipe)
	if err != nil {
		cmd.Process.Kill()
		d.err = fmt.Errorf("the arm64 device process: %w", err)
		return
	}
	d.addr = a
	proctest.Relay(sc, "[tcp-arm64] ")
}
