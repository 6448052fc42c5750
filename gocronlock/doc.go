// Package gocronlock runs gocron v2 jobs under leasehold locks, with the
// lock's fence and lost-lock context reachable from the job.
//
// It is a module of its own, so that users of leasehold who do not use
// gocron never download it. Its name says its role and does not clash with
// the gocron package it plugs into.
//
// A Locker (gocron.WithDistributedLocker) takes one lease per run of a job,
// keyed by the job's name: among schedulers that share a store, one runs
// each slot. A run keeps its lock for at least the minimum hold
// (WithMinHold, default 2 s) counted from its Lock call, however soon the
// job returns, so that a scheduler whose clock or timer fires a little
// later finds the key held and skips the slot; the next slot finds it free.
// A job calls Locker.Lease with its name to get its context and lease.
//
// An Elector (gocron.WithDistributedElector) campaigns with leasehold's Lead
// in a goroutine until Close: only the leader's scheduler runs jobs. A job
// calls Elector.Lease with its context.
//
// In both, the context a job gets ends when the lock is lost: under
// leasehold's fence policy, before the lease can expire when renewals fail,
// with a cause matching leasehold.ErrAbandoned. Send the lease's Fence with
// every write the job makes, and have the storage refuse an older one
// (package fence).
//
// What it does not guarantee: two schedulers whose attempts at one slot are
// further apart than half the minimum hold (a Locker), or than the leader's
// drift margin (an Elector, a tenth of its TTL), can both run that slot;
// gocron tells the lock nothing about the slot, so only the timing keeps
// them apart. A job's interval must exceed the minimum hold. A scheduler
// cut off from the store after a run holds its job's key until the lease's
// TTL (WithTTL) ends. docs/gocron.md gives the arithmetic.
package gocronlock
