package plugin

// HostSharer is implemented by devices whose kernels work on the host's
// memory itself, as OpenMP's unified shared memory has it. LLVM's zero-copy
// maps on an APU do the same. ShareHost lends the device the host buffer b,
// which is not empty. It returns the device address that names b's first
// byte: the device pointer is the host address.
//
// The runtime then maps a buffer on the device without allocating or
// copying. The present table's entry names b, with its reference counts
// and errors as ever. The copies of maps and target update are left out.
// Free of the address ends the lending and leaves b as it is.
// The device's kernels and copies read and write b in place.
// Memory from Alloc stays the device's own, copied as on any device.
type HostSharer interface {
	ShareHost(b []byte) (Ptr, error)
}
