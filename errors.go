package leasehold

import (
	"errors"

	"github.com/leasehold/leasehold/driver"
)

// Errors, matched with errors.Is or errors.As. Stores return the same values
// (package driver defines them for store implementers).
var (
	// ErrNotAcquired means another owner holds the key, or, from a waiting
	// Acquire, that its context ended first (joined with the context's error).
	ErrNotAcquired = driver.ErrNotAcquired

	// ErrNotOwned means the key no longer holds the lease's token: it
	// expired, was released, or belongs to another owner. Nothing changed.
	ErrNotOwned = driver.ErrNotOwned

	// ErrAbandoned is the cause set on a critical section's context when
	// renewal could no longer be trusted and the lease was given up without
	// a release.
	ErrAbandoned = errors.New("leasehold: lock abandoned")

	// ErrClosed is returned by a Client's calls after Close, and is the cause
	// on the Context of every KeepAlive that Close stopped.
	ErrClosed = errors.New("leasehold: client closed")

	// ErrInvalidArgument is matched by every *ArgumentError.
	ErrInvalidArgument = driver.ErrInvalidArgument
)

// ArgumentError reports a bad argument, by name, before anything is written.
type ArgumentError = driver.ArgumentError

// HeldError is a not-acquired answer carrying the holder's remaining TTL
// when the store knows it. It matches ErrNotAcquired.
type HeldError = driver.HeldError
