package redisslot

import "testing"

func TestKeySlotKnownValues(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 check value = %#x, want 0x31c3", got)
	}
	cases := map[string]uint16{
		"foo":                  12182,
		"{user1000}.following": KeySlot("user1000"),
		"{user1000}.followers": KeySlot("user1000"),
		"foo{}{bar}":           crc16("foo{}{bar}") % numSlots, // empty first tag: whole key
		"foo{{bar}}zap":        crc16("{bar") % numSlots,
		"foo{bar}{zap}":        crc16("bar") % numSlots,
		"x}{y":                 crc16("x}{y") % numSlots,
	}
	for key, want := range cases {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
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

func TestCompanionSharesTheSlot(t *testing.T) {
	for _, key := range []string{"x}{y", "{}odd", "{tenant}:x", "a{b}c", "plain", "{", "}"} {
		c := Companion("leasehold:fence:", key)
		if KeySlot(c) != KeySlot(key) {
			t.Errorf("Companion(%q) = %q in slot %d, key in slot %d", key, c, KeySlot(c), KeySlot(key))
		}
	}
}

// The table-driven crc16 agrees with the polynomial applied bit by bit.
func TestCRC16MatchesBitwise(t *testing.T) {
	bitwise := func(s string) uint16 {
		var crc uint16
		for i := 0; i < len(s); i++ {
			crc ^= uint16(s[i]) << 8
			for range 8 {
				if crc&0x8000 != 0 {
					crc = crc<<1 ^ 0x1021
				} else {
					crc <<= 1
				}
			}
		}
		return crc
	}
	s := make([]byte, 0, 300)
	for i := range 300 {
		s = append(s, byte(i*131+7))
		if got, want := crc16(string(s)), bitwise(string(s)); got != want {
			t.Fatalf("crc16 of %d bytes = %#x, bitwise %#x", len(s), got, want)
		}
	}
}

func BenchmarkCompanion(b *testing.B) {
	for b.Loop() {
		_ = Companion("leasehold:fence:", "storetest:TestSomething:ABCDEFGHIJ:42")
	}
}
