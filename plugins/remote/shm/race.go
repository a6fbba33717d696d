//go:build race

package shm

import "syscall"

// For the race detector, what a process writes into a shared-memory link
// happens before what it reads from any link afterwards, as for Go's own
// socket and file I/O: the syscall package draws that edge on a variable of
// its own (ioSync) in Write and in a Read that succeeds, and these calls
// draw it too, so that buffers ordered through another process — over a
// shared-memory link one way and a socket the other — are not reported as
// races. The calls cost a system call each, in race builds only.

var devNull = func() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}()

func shmReleased() { syscall.Write(-1, nil) }             // releases ioSync, then fails: EBADF
func shmAcquired() { syscall.Read(devNull, []byte(nil)) } // a read that succeeds acquires ioSync
