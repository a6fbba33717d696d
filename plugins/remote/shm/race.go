//go:build race

package shm

import "syscall"

// For the race detector, what a process writes into a shared-memory link
// happens before what it reads from any link afterwards. That is as for Go's
// own socket and file I/O. The syscall package draws that edge on a variable
// of its own (ioSync), in Write and in a Read that succeeds. These calls draw
// it too. So buffers ordered through another process are not reported as
// races. (Such a buffer goes over a shared-memory link one way and a socket
// the other.) The calls cost a system call each, in race builds only.

var devNull = func() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}()

func shmReleased() { syscall.Write(-1, nil) }             // releases ioSync, then fails: EBADF
func shmAcquired() { syscall.Read(devNull, []byte(nil)) } // a read that succeeds acquires ioSync
