package testbed_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/testbed"
	"github.com/goffload/offload/role"
)

// TestMain serves as a device when the testbed starts this binary as one,
// and runs the helpers below when a test starts it as one (in a machine).
func TestMain(m *testing.M) {
	role.ServeDevice()
	switch os.Getenv("TESTBED_HELPER") {
	case "echo":
		os.Exit(echo(os.Getenv("TESTBED_ADDR")))
	case "dial":
		os.Exit(dial(os.Getenv("TESTBED_ADDR")))
	}
	os.Exit(m.Run())
}

// echo serves addr, echoing what each connection sends, after saying
// where it listens on stdout.
func echo(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			io.Copy(c, c)
			c.Close()
		}()
	}
}

// dial sends a line to the echo server at addr and prints what comes back.
func dial(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// self is this test binary.
func self(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// startEcho starts an echo server on host:0 in machine m until the test
// ends and returns its address.
func startEcho(t *testing.T, m *testbed.Machine, host string) string {
	t.Helper()
	cmd := m.Command(self(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESTBED_HELPER=echo", "TESTBED_ADDR="+net.JoinHostPort(host, "0"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			go io.Copy(io.Discard, out)
			return a
		}
	}
	t.Fatalf("the echo server in %v did not say where it listens", m)
	return ""
}

// dialFrom runs the dial helper in machine m against addr and returns
// what came back.
func dialFrom(t *testing.T, m *testbed.Machine, addr string) (string, error) {
	t.Helper()
	cmd := m.Command(self(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESTBED_HELPER=dial", "TESTBED_ADDR="+addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("dialing %s from %v: %v: %s", addr, m, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// roundTrip sends a line on c and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, msg string, d time.Duration) error {
	c.SetDeadline(time.Now().Add(d))
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(line); got != msg {
		return fmt.Errorf("echoed %q, want %q", got, msg)
	}
	return nil
}
