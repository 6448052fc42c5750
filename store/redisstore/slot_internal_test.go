package redisstore

import "testing"

func TestKeySlotKnownValues(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 check value = %#x, want 0x31c3", got)
	}
	cases := map[string]uint16{
		"foo":                  12182,
		"{user1000}.following": keySlot("user1000"),
		"{user1000}.followers": keySlot("user1000"),
		"foo{}{bar}":           crc16("foo{}{bar}") % numSlots, // empty first tag: whole key
		"foo{{bar}}zap":        crc16("{bar") % numSlots,
		"foo{bar}{zap}":        crc16("bar") % numSlots,
		"x}{y":                 crc16("x}{y") % numSlots,
	}
	for key, want := range cases {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestEverySlotHasATag(t *testing.T) {
	for slot := range uint16(numSlots) {
		tag := slotTag(slot)
		if len(tag) != 3 || crc16(tag)%numSlots != slot {
			t.Fatalf("slot %d: tag %q hashes to %d", slot, tag, crc16(tag)%numSlots)
		}
	}
}
