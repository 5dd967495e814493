package embedded

import (
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// blockedBloom is a bloom filter whose bits are split into blocks of one
// cache line (512 bits): a key sets and tests bits of one block only. With
// millions of ids the filter is far larger than the CPU caches, so a test or
// an add costs one cache miss instead of one per probe; for the same rate of
// false positives it needs a little more memory.
type blockedBloom struct {
	blocks [][8]uint64
}

const (
	bloomBitsPerKey = 11 // with 7 probes: about 0.7 % false positives when full
	bloomProbes     = 7
)

// newBlockedBloom sizes a filter for n keys.
func newBlockedBloom(n uint) *blockedBloom {
	return &blockedBloom{blocks: make([][8]uint64, max((n*bloomBitsPerKey+511)/512, 1))}
}

// locate hashes key to its block and the two hashes its probes derive from.
func (b *blockedBloom) locate(key []byte) (block *[8]uint64, h1, h2 uint32) {
	h := xxh3.Hash128(key)
	i := ((h.Hi >> 32) * uint64(len(b.blocks))) >> 32 // uniform in [0, blocks) without a division
	return &b.blocks[i], uint32(h.Lo), uint32(h.Lo>>32) | 1
}

func (b *blockedBloom) add(key []byte) {
	block, h1, h2 := b.locate(key)
	for i := range uint32(bloomProbes) {
		bit := (h1 + i*h2) & 511
		block[bit>>6] |= 1 << (bit & 63)
	}
}

// addAtomic is add for filters being filled from several goroutines.
func (b *blockedBloom) addAtomic(key []byte) {
	block, h1, h2 := b.locate(key)
	for i := range uint32(bloomProbes) {
		bit := (h1 + i*h2) & 511
		atomic.OrUint64(&block[bit>>6], 1<<(bit&63))
	}
}

// mayContain is false only for keys never added.
func (b *blockedBloom) mayContain(key []byte) bool {
	block, h1, h2 := b.locate(key)
	for i := range uint32(bloomProbes) {
		bit := (h1 + i*h2) & 511
		if block[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// appendTo appends the filter's encoding: the block count, then the bits.
func (b *blockedBloom) appendTo(buf []byte) []byte {
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(b.blocks)))
	for i := range b.blocks {
		for _, w := range b.blocks[i] {
			buf = binary.LittleEndian.AppendUint64(buf, w)
		}
	}
	return buf
}

func decodeBlockedBloom(data []byte) (*blockedBloom, error) {
	if len(data) < 8 {
		return nil, errors.New("bloom filter: short")
	}
	n := binary.BigEndian.Uint64(data)
	data = data[8:]
	if n == 0 || uint64(len(data)) != n*64 {
		return nil, errors.New("bloom filter: size mismatch")
	}
	b := &blockedBloom{blocks: make([][8]uint64, n)}
	for i := range b.blocks {
		for j := range b.blocks[i] {
			b.blocks[i][j] = binary.LittleEndian.Uint64(data)
			data = data[8:]
		}
	}
	return b, nil
}
