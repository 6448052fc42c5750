// Package kubestore is the Kubernetes backend of leasehold: each lock is a
// coordination.k8s.io/v1 Lease, read and written through the API server's
// REST interface (JSON over HTTP) by the Store itself. New takes a Config:
// the server's URL and an *http.Client that carries TLS and credentials.
// InCluster makes it in a pod, LoadKubeconfig from a kubeconfig (tokens,
// token files, client certificates, exec credential plugins); a program
// that has client-go passes rest.HTTPClientFor(cfg). The Store links no
// Kubernetes library: client-go's REST client alone is about a hundred
// packages, which every user of the leasehold CLI would compile for the
// dozen requests the Store makes. An Update sends back every field of the
// Lease as the server sent it, those this package does not know included,
// so it never drops another writer's fields. It lives in a Go module of its
// own. It suits control planes that already run on Kubernetes and
// coordinate through Leases (kube-scheduler's leader election among them):
// they get the fence, the renewal policy, the drill and the operator
// tooling on the store they already run. client-go's leaderelection does not
// fence; this Store does.
//
// # Objects
//
// Each lock key has one Lease in the Store's namespace, named by Name: the
// prefix ("leasehold-"), up to 40 characters of the key made DNS-safe, then
// 32 hex digits of the key's SHA-256, so that every valid key (up to 512
// bytes of any UTF-8) has a valid name of at most 136 bytes. The key itself
// is kept in the annotation leasehold.dev/key and checked on every read: a
// Lease whose annotation names another key is an error and is never written,
// so even a hash collision cannot make two keys share a lock. The Lease
// holds:
//
//   - spec.holderIdentity: the owner's token (which carries the holder's
//     identity after its '~'), so "kubectl get leases" shows who holds what;
//     unset when the lock is free;
//   - spec.leaseDurationSeconds: the TTL rounded up to whole seconds;
//   - spec.acquireTime and spec.renewTime: informational only, see below;
//   - the annotation leasehold.dev/fence: the key's last fence;
//   - the annotation leasehold.dev/audit: the newest 32 forced releases;
//   - the label app.kubernetes.io/managed-by=leasehold.
//
// # Operations and round trips
//
// Every write is an Update carrying the resourceVersion of the read before
// it, so the API server refuses it with a conflict if anyone wrote the Lease
// in between (optimistic concurrency): there is no window between the check
// of the owner and the write.
//
//   - Acquire: Get the Lease; Create it when missing, else Update it when it
//     is free or expired. Two round trips. A conflict (another client won
//     the race) reads again, at most 5 rounds.
//   - Release: Get, check the token, Update clearing the holder. The Lease
//     is not deleted: it keeps the fence.
//   - Renew: Get, check the token, Update renewTime and the duration. Every
//     renewal is a write, even to the same TTL.
//   - Release and Renew skip the Get when this Store wrote the Lease last
//     (the acquire or the previous renewal) and its own count says it has
//     not expired: they send the Update from the version that write
//     returned, one round trip. If anyone wrote the Lease since, the Update
//     fails with a conflict and they read and decide again.
//   - Inspect: one Get.
//   - WatchReleases: a watch on the Lease (a field selector on its name),
//     created once per key and shared by that key's waiters in this Store.
//   - List (driver.Lister) and Audit(""): one listing of the Store's Leases
//     in the namespace (label selector, pages of 500) per call.
//   - ForceRelease: Get, then one Update that clears the holder and appends
//     the audit record together.
//
// # Expiry: the observer's clock, never the holder's
//
// A Lease's renewTime is written with the holder's clock; comparing it with
// another host's clock would make mutual exclusion depend on the two clocks
// agreeing. The Store never does. As client-go's leaderelection does with
// its observed time, a Store considers a held Lease expired only when it has
// seen the same version of it (the same resourceVersion) for the Lease's
// whole leaseDurationSeconds by its own monotonic clock, counted from its
// own first read of that version. Any write to the Lease (a renewal) is a
// new version and starts the count again.
//
// This is safe without synchronised clocks: a Store's first read of a
// version comes after the write that made it, which came after its owner
// started the acquire or renew from which it counts its TTL, so the owner
// believes itself the holder for less time than any observer waits. Only the
// clocks' rates must agree (as with every lease), not their readings. The
// takeover itself is an Update guarded by the version the waiter watched, so
// a renewal that lands first makes the takeover fail, and a takeover that
// lands first makes the renewal fail with ErrNotOwned.
//
// What it costs is takeover time: a waiter must observe the Lease unchanged
// for the full duration from ITS first observation. A crashed holder's key
// is taken over one duration after the later of the holder's last write and
// the waiter's first read of that version (plus the waiter's polling), never
// earlier: a waiter that first looks at a Lease whose holder died an hour
// ago still waits the full duration from its look, since it cannot tell a
// dead holder from a live one whose renewTime is an hour behind. A waiter
// that was already waiting when the holder died takes over one duration
// after the holder's last renewal, as with a server-side TTL. A Store that
// restarts (or a new process) counts from its first look again.
// Inspect, List and the Remaining of a *driver.HeldError report the rest
// of the duration as this Store counts it. The same rule applies to the
// holder's own Renew and Release: a Store that has seen its own Lease
// unchanged for the duration answers ErrNotOwned, as after an expiry.
//
// Release notifications wake waiters when a Lease is seen free; an expiry
// writes nothing and wakes no one: waiters try again when the Remaining of
// their HeldError says.
//
// # Rounding
//
// leaseDurationSeconds is a whole number of seconds, so the Store rounds
// every TTL up, as etcdstore does: a lock is never held for less time than
// its owner asked for, and may be held for up to a second more (a 30 ms TTL
// is a 1 s Lease). With the observer's count above, a takeover of an expired
// 30 ms lease takes at least a second.
//
// # Fences
//
// The fence is a counter in the annotation leasehold.dev/fence, raised by one
// in the same resourceVersion-guarded Update that takes the lock, so two
// acquires can never issue the same fence. Release and expiry leave the
// Lease and its annotation in place, so fences rise per key across them. The
// resourceVersion is not used as the fence: Kubernetes documents it as
// opaque, and the Store only ever compares two of them for equality.
//
// A Lease the Store creates starts at this host's clock in microseconds
// since 1970, as redisstore and pgstore floor their fences on a clock. So if
// an operator deletes a Lease (taking its annotation with it), the next
// acquire creates it again with a fence above every fence it issued, on
// condition that the creating host's clock is not behind the clock of the
// host that created the deleted Lease by more than the time between the two
// creations (less one microsecond per acquire in between, which no API
// server comes near). Restoring the cluster's etcd from a backup rolls the
// annotation back like every other object; fences issued since may then be
// issued again, unless the Lease is deleted (which floors it on the clock).
//
// # What it does not guarantee
//
//   - A client that is paused, or cut off, still believes it holds a lock
//     that has expired and been taken over. Only the fence checked where the
//     data is written protects against that.
//   - An API server that cannot be reached, or whose etcd has no quorum,
//     gives an error, never a false "acquired" and never ErrNotAcquired.
//     Every request is bounded by the caller's context (and by
//     Config.Client's Timeout, which should be 0: see Config).
//   - The Store has no client-side rate limit (client-go's QPS 5 would stall
//     a lock service); the API server's priority and fairness is the only
//     one, and an overloaded server's 429 is an error of the operation.
//   - Leases of keys no longer used stay in the namespace (a few hundred
//     bytes each), like etcdstore's fence keys. Delete them when the keys
//     are retired for good; their fences then restart from the clock.
//
// # Permissions
//
// The Store needs get, list, watch, create and update on leases in
// coordination.k8s.io in its namespace, nothing else (no delete).
//
// # Goroutines
//
// The Store starts one goroutine per key that has waiters, to read its
// watch; the key's last waiter stops it, and Close stops all of them and
// waits for them.
package kubestore
