package transport

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestReaderDoesNotSpinWhileComputing: a read that would spin for its
// whole budget parks at once while a kernel runs in the process, so that
// the kernel's workers keep every core; without a kernel it spins (the
// control). The data comes 50 ms after the read starts, the spin budget is
// a second; what is measured is the CPU time of the whole process during
// the read, not how long it took.
func TestReaderDoesNotSpinWhileComputing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kernels   int32
		spinsLong bool // the control: the read spins
	}{{"computing", 1, false}, {"idle", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := socketPair(t)
			r := SpinReader(a, time.Second)
			computing.Add(tc.kernels)
			defer computing.Add(-tc.kernels)
			go func() {
				time.Sleep(50 * time.Millisecond)
				b.Write([]byte{1})
			}()
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			buf := make([]byte, 1)
			if _, err := r.Read(buf); err != nil {
				t.Fatal(err)
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()) - time.Duration(before.Utime.Nano()+before.Stime.Nano())
			_, parked := r.(interface{ Stats() (int64, int64) }).Stats()
			if tc.spinsLong {
				if parked != 0 {
					t.Errorf("an idle process's read parked before its 1s budget: it did not spin")
				}
				return
			}
			if cpu > 20*time.Millisecond || parked != 1 {
				t.Errorf("a read while a kernel runs used %v of CPU in 50ms (parked: %d): it spun", cpu, parked)
			}
		})
	}
}

// TestOneReaderSpins: while one reader of the process spins, another
// parks at once rather than spin beside it (two spinners leave no thread
// in the network poller on a 2-core machine). The first read has no data
// for its whole budget of a second; the second read's data comes 50 ms
// after it starts; then the first one's comes.
func TestOneReaderSpins(t *testing.T) {
	a1, b1 := socketPair(t)
	a2, b2 := socketPair(t)
	r1, r2 := SpinReader(a1, time.Second), SpinReader(a2, time.Second)
	first := make(chan error, 1)
	go func() {
		_, err := r1.Read(make([]byte, 1))
		first <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); !spinner.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the first reader never spun")
		}
		time.Sleep(time.Millisecond)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		b2.Write([]byte{1})
	}()
	if _, err := r2.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, parked := r2.(interface{ Stats() (int64, int64) }).Stats(); parked != 1 {
		t.Errorf("a read while another reader spun: parked %d times, want 1 (it spun too)", parked)
	}
	b1.Write([]byte{1})
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if spinner.Load() {
		t.Error("no reader reads, and the spinner role is still held")
	}
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var c [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "test-socket")
		c[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c[i].Close() })
	}
	return c[0], c[1]
}
