//go:build !amd64 && !arm64

package shm

// sysMemfdCreate is unknown here. newShmFile fails, and local devices' links
// stay on their sockets.
const sysMemfdCreate = ^uintptr(0)
