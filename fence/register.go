package fence

import (
	"bytes"
	"context"
	"sync"

	"github.com/leasehold/leasehold/driver"
)

// Register is fenced key-value storage: each key keeps the value written
// with the newest fence. It is the interface a caller implements to plug in
// its own store; MemRegister, redisfence and pgfence provide it.
type Register interface {
	// Write stores value under key if the mode accepts fence over the key's
	// current fence, raising the key's fence in the same atomic step. It
	// returns a *StaleError, writing nothing, when it does not, and an
	// *driver.ArgumentError for a fence that is not positive.
	Write(ctx context.Context, key string, fence int64, value []byte) error

	// Read returns key's value and the fence it was written with; a key
	// never written has a nil value and fence 0.
	Read(ctx context.Context, key string) (value []byte, fence int64, err error)
}

// MemRegister is an in-memory Register for tests and single-process use.
// The zero value is not usable; call NewMemRegister.
type MemRegister struct {
	cfg     Config
	mu      sync.Mutex
	entries map[string]memEntry
}

type memEntry struct {
	value []byte
	fence int64
}

var _ Register = (*MemRegister)(nil)

// NewMemRegister returns an empty MemRegister. Options: WithMode (default
// Strict) and OnReject; a nil one is skipped. It cannot fail, so a Mode
// other than Strict and SameHolder is not refused: it accepts as Strict
// does.
func NewMemRegister(opts ...Option) *MemRegister {
	return &MemRegister{cfg: NewConfig(opts...), entries: make(map[string]memEntry)}
}

// Write implements Register.
func (r *MemRegister) Write(ctx context.Context, key string, fence int64, value []byte) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := Validate(fence); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	cur := r.entries[key].fence
	ok := r.cfg.Mode.Accepts(fence, cur)
	if ok {
		r.entries[key] = memEntry{value: bytes.Clone(value), fence: fence}
	}
	r.mu.Unlock()
	// The hook runs unlocked: one that reads the register must not hang.
	if !ok {
		return r.cfg.Reject(ctx, "memory", key, fence, cur)
	}
	return nil
}

// Read implements Register.
func (r *MemRegister) Read(ctx context.Context, key string) ([]byte, int64, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[key]
	return bytes.Clone(e.value), e.fence, nil
}
