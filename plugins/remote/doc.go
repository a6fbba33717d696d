// Package remote is the device kind whose devices are CPU processes of the
// program: local device processes on this machine (local:N, linked through
// shared memory), processes on other machines over TCP (tcp://host:port,
// TLS 1.3 by default, the shared secret proved over each session: tcpsec.go),
// and the ranks of an MPI job (mpi); the host drives each through a link
// that carries typed frames (package proto) in the order package state
// rules.
//
// The same binary is the host and the device: a process started as a
// device serves from offload.Start or role.ServeDevice (the kind's
// ServeIfDevice hook) and never returns to the program.
//
// Where things are: client.go and queue.go are the host's side of a
// device (plugin.Device and plugin.Queue over a link); server.go and
// transfers.go the device process's; link.go and linkread.go the link (one
// writer, one reader goroutine); transport.go the byte transports beneath
// it: shm.go (shared-memory rings with a socket as doorbell), tcp.go and
// tcpsec.go (TCP sessions and their protection) and mpitransport.go; local.go, tcp.go and mpi.go open devices of each spec;
// peer.go links device processes to each other for device-to-device
// copies; tag.go and timing.go time operations for traces.
package remote
