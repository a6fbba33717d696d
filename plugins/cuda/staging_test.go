package cuda

import (
	"bytes"
	"testing"
)

// TestPcopy: every split of pcopy copies every byte, at sizes around its
// pieces.
func TestPcopy(t *testing.T) {
	for _, n := range []int{0, 1, pcopyPiece - 1, pcopyPiece, 2*pcopyPiece + 3, chunkSize - 1, chunkSize, 3*chunkSize + 7} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*131 + i>>8)
		}
		dst := make([]byte, n)
		pcopy(dst, src)
		if !bytes.Equal(dst, src) {
			t.Errorf("pcopy of %d bytes: the copy differs", n)
		}
	}
}

// BenchmarkStagingCopy: the host's side of a staged copy, one chunk from
// Go memory into another buffer, with pcopy against one copy (the ratio
// says what splitting gains on this machine's cores: the DMA of the chunk
// before runs meanwhile, so staging keeps up with the DMA only while this
// copy is faster).
func BenchmarkStagingCopy(b *testing.B) {
	// A source larger than the caches, copied a chunk at a time as a
	// large Submit is.
	src := make([]byte, 64*chunkSize)
	dst := make([]byte, chunkSize)
	for i := range src {
		src[i] = byte(i)
	}
	for _, c := range []struct {
		name string
		f    func(dst, src []byte)
	}{{"pcopy", pcopy}, {"copy", func(dst, src []byte) { copy(dst, src) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(chunkSize)
			off := 0
			for b.Loop() {
				c.f(dst, src[off:off+chunkSize])
				off = (off + chunkSize) % len(src)
			}
		})
	}
}
