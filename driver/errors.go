package driver

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is: the errors returned by the
// Client and by stores wrap them and add the key or the backend's reason.
var (
	// ErrNotAcquired means another owner holds the key, or, from a waiting
	// Acquire, that its context ended before the key came free (joined with
	// the context's error). A store that cannot answer returns its own error,
	// never this one.
	ErrNotAcquired = errors.New("leasehold: not acquired")

	// ErrNotOwned means the key no longer holds the caller's token: the lease
	// expired, was released, or now belongs to another owner. Nothing was
	// changed in the store.
	ErrNotOwned = errors.New("leasehold: not owned")

	// ErrInvalidArgument is matched by every *ArgumentError.
	ErrInvalidArgument = errors.New("leasehold: invalid argument")
)

// ArgumentError reports a bad argument. It names the argument so the caller
// can tell which one to fix, and it is returned before anything is written.
type ArgumentError struct {
	Arg    string // the argument's name: "key", "ttl", "token"
	Reason string // what is wrong with it
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("leasehold: invalid %s: %s", e.Arg, e.Reason)
}

// Is makes every ArgumentError match ErrInvalidArgument.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// HeldError is a not-acquired answer that carries what the store knows of the
// current holder. It matches ErrNotAcquired.
type HeldError struct {
	Key string
	// Remaining is the holder's remaining TTL as seen by the store, or 0
	// when the store does not report it. Waiters use it so that a lease
	// that expires (rather than being released) is taken over promptly.
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	if e.Remaining > 0 {
		return fmt.Sprintf("leasehold: not acquired: %q is held by another owner for %v more", e.Key, e.Remaining)
	}
	return fmt.Sprintf("leasehold: not acquired: %q is held by another owner", e.Key)
}

// Is makes every HeldError match ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }
