package shm

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/plugins/remote/transport"
)

// shmPair is both sides of one shared-memory link, in this process, with
// a doorbell socket as local devices' links have.
func shmPair(t *testing.T) (*conn, *conn) { return shmPairOf(t, true) }

// shmPairOf is shmPair, with a doorbell or (bells false) parking on the
// futex as bench's raw links do.
func shmPairOf(t *testing.T, bells bool) (*conn, *conn) {
	t.Helper()
	f, err := newFile()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bellA, bellB net.Conn
	if bells {
		bellA, bellB = socketPair(t)
	}
	a, err := newConn(int(f.Fd()), 0, bellA, "side 0's socket closed")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newConn(int(f.Fd()), 1, bellB, "side 1's socket closed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestShmStreamsBothWays: bytes written in pieces of every size, the ring
// wrapping many times, come out the other side unchanged and in order,
// both ways at once.
func TestShmStreamsBothWays(t *testing.T) {
	a, b := shmPair(t)
	const total = 3*shmRingSize + 12345
	send := func(w io.Writer, seed int64) []byte {
		rng := rand.New(rand.NewSource(seed))
		data := make([]byte, total)
		rng.Read(data)
		for off := 0; off < total; {
			n := min(total-off, []int{1, 7, 4096, 1 << 20, shmRingSize + 3}[rng.Intn(5)])
			if _, err := w.Write(data[off : off+n]); err != nil {
				t.Error(err)
				return data
			}
			off += n
		}
		return data
	}
	recv := func(r io.Reader, seed int64) []byte {
		rng := rand.New(rand.NewSource(seed))
		got := make([]byte, 0, total)
		buf := make([]byte, shmRingSize+100)
		for len(got) < total {
			n, err := r.Read(buf[:1+rng.Intn(len(buf)-1)])
			if err != nil {
				t.Errorf("read after %d bytes: %v", len(got), err)
				return got
			}
			got = append(got, buf[:n]...)
		}
		return got
	}
	var wg sync.WaitGroup
	var sentAB, sentBA, gotAB, gotBA []byte
	wg.Add(4)
	go func() { defer wg.Done(); sentAB = send(a, 1) }()
	go func() { defer wg.Done(); sentBA = send(b, 2) }()
	go func() { defer wg.Done(); gotAB = recv(b, 3) }()
	go func() { defer wg.Done(); gotBA = recv(a, 4) }()
	wg.Wait()
	if !bytes.Equal(sentAB, gotAB) || !bytes.Equal(sentBA, gotBA) {
		t.Fatal("bytes differ after crossing the rings")
	}
}

// TestShmCloseIsEOFAfterData: the other side reads what was written before
// Close, then io.EOF; the closing side's own reads and writes fail.
func TestShmCloseIsEOFAfterData(t *testing.T) {
	a, b := shmPair(t)
	if _, err := a.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v; want the bytes written before Close, then EOF", got, err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on the closed side: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write([]byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on the closed side: %v, want net.ErrClosed", err)
	}
	if _, err := b.Write([]byte{1}); err == nil {
		t.Error("a write to a side that closed succeeded")
	}
}

// TestShmParkedReaderWakes: a reader that parked (its spin skipped), on
// the doorbell socket or on the futex, is woken by a write, and by a close
// with a cause, which it returns; on the doorbell, by the other side's
// socket closing, as when its process dies.
func TestShmParkedReaderWakes(t *testing.T) {
	for _, bells := range []bool{true, false} {
		t.Run(map[bool]string{true: "doorbell", false: "futex"}[bells], func(t *testing.T) {
			a, b := shmPairOf(t, bells)
			parkAtOnce(&b.bo) // park at once
			got := make(chan error, 1)
			read := func(want string) {
				buf := make([]byte, 4)
				n, err := b.Read(buf)
				if err == nil && string(buf[:n]) != want {
					err = errors.New("read " + string(buf[:n]))
				}
				got <- err
			}
			go read("ping")
			waitFor(t, func() bool { return b.rx.h.rParked.Load() != 0 }, "the reader to park")
			if _, err := a.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			if _, parked := b.Stats(); parked == 0 {
				t.Error("the reader never parked: the test did not test the wake-up")
			}
			cause := errors.New("the link failed")
			go read("")
			waitFor(t, func() bool { return b.rx.h.rParked.Load() != 0 }, "the reader to park again")
			b.closeWith(cause)
			select {
			case err := <-got:
				if !errors.Is(err, cause) {
					t.Fatalf("read after closeWith: %v, want %v", err, cause)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a parked reader was not woken by the close")
			}
		})
	}
	t.Run("doorbell closed", func(t *testing.T) {
		a, b := shmPair(t)
		parkAtOnce(&b.bo)
		got := make(chan error, 1)
		go func() {
			_, err := b.Read(make([]byte, 1))
			got <- err
		}()
		waitFor(t, func() bool { return b.rx.h.rParked.Load() != 0 }, "the reader to park")
		a.bell.Close() // the other process died: its socket closed, its ring untouched
		select {
		case err := <-got:
			if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "side 1's socket closed") {
				t.Fatalf("read after the other side's socket closed: %v, want an EOF that says what ended", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a parked reader did not hear that the other side's socket closed")
		}
	})
}

// TestShmKick: a reader parked on the doorbell that kick wakes polls again
// and still reads what comes after.
func TestShmKick(t *testing.T) {
	a, b := shmPair(t)
	parkAtOnce(&b.bo) // park at once
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 4)
		n, err := b.Read(buf)
		if err == nil && string(buf[:n]) != "next" {
			err = errors.New("read " + string(buf[:n]))
		}
		got <- err
	}()
	waitFor(t, func() bool { return b.rx.h.rParked.Load() != 0 }, "the reader to park")
	b.Kick()
	waitFor(t, func() bool { return b.kicked.Load() == 1 }, "the kick to wake the reader")
	if _, err := a.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestShmKickEndsAwaitReadable: the host's link reader waiting between
// frames (awaitReadable) returns when kicked, though the ring is empty: a
// caller that polled for its answer (device.await) read the frames behind
// it out of the ring into the link's read buffer, and kicks the reader to
// take them from there, which it sees only once awaitReadable returns.
// Before, a kicked awaitReadable went back to waiting for the ring, and
// those frames (a device's event, its request for a submit's data) waited
// for the next frame that came, a heartbeat up to a second later.
func TestShmKickEndsAwaitReadable(t *testing.T) {
	_, b := shmPair(t)
	parkAtOnce(&b.abo)
	done := make(chan struct{})
	go func() {
		b.AwaitReadable(func() bool { return true })
		close(done)
	}()
	waitFor(t, func() bool { return b.rx.h.rParked.Load() != 0 }, "the reader to park")
	b.Kick()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a kicked awaitReadable went on waiting for the ring (waited 20s)")
	}
	if b.ready() {
		t.Fatal("the ring is not empty: awaitReadable returned for the kick, not for data")
	}
}

// TestShmWriterWaitsForRoom: a write larger than the ring waits for the
// reader, and TryWriteFrames writes only what fits.
func TestShmWriterWaitsForRoom(t *testing.T) {
	a, b := shmPair(t)
	full := make([]byte, shmRingSize)
	if n, err := a.TryWriteFrames(full); n != shmRingSize || err != nil {
		t.Fatalf("TryWriteFrames into an empty ring: %d, %v", n, err)
	}
	if n, err := a.TryWriteFrames([]byte{1}); n != 0 || err != nil {
		t.Fatalf("TryWriteFrames into a full ring: %d, %v; want 0, nil", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Write([]byte("after"))
		done <- err
	}()
	if _, err := io.ReadFull(b, make([]byte, shmRingSize)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "after" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// TestShmCorruptRing: a ring whose shared head says it holds more than it
// can (the other process wrote its memory out of turn) ends the link with
// an error, not a read past the ring.
func TestShmCorruptRing(t *testing.T) {
	a, b := shmPair(t)
	a.tx.h.head.Store(shmRingSize + 1)
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, errShmCorrupt) {
		t.Fatalf("read of a corrupt ring: %v, want errShmCorrupt", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
	}
}

// FuzzShmRing: whatever the other process leaves in a ring's shared words
// (head, tail, closed), a read and a write return data or an error, never
// touch memory outside the ring, and a ring said to hold more than it can
// ends the link.
func FuzzShmRing(f *testing.F) {
	f.Add(uint64(5), uint64(0), false)
	f.Add(uint64(shmRingSize+1), uint64(0), false)
	f.Add(uint64(0), uint64(1), true)
	f.Add(uint64(1<<63), uint64(1<<63-7), false)
	f.Fuzz(func(t *testing.T, head, tail uint64, closed bool) {
		a, b := shmPair(t)
		if head == tail && !closed {
			closed = true // else the read waits for data that never comes
		}
		for _, h := range []*ringHdr{a.tx.h, b.tx.h} {
			h.head.Store(head)
			h.tail.Store(tail)
			if closed {
				h.closed.Store(1)
			}
		}
		buf := make([]byte, 64)
		n, rerr := b.Read(buf)
		b.TryWriteFrames([]byte("frame")) // must not panic, whatever it returns
		if head-tail > shmRingSize {
			if !errors.Is(rerr, errShmCorrupt) {
				t.Fatalf("head %d tail %d: read %d, %v; want errShmCorrupt", head, tail, n, rerr)
			}
			return
		}
		if rerr == nil && (n == 0 || uint64(n) > min(head-tail, 64)) {
			t.Fatalf("head %d tail %d: read %d bytes", head, tail, n)
		}
	})
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

// parkAtOnce makes the next reads by bo park at once, as after an idle
// link (the backoff at its longest: 64 reads).
func parkAtOnce(bo *transport.Backoff) {
	for range 8 {
		bo.After(true, false, time.Now().Add(-time.Hour))
	}
}
