package leasehold_test

import "github.com/leasehold/leasehold"

// localFirst is a Client's Hold seen as the local-first pattern's tests
// used it: Hold takes a local turn per key first, and Len counts the keys
// whose turns are taken or awaited.
type localFirst struct{ *leasehold.Client }

func (lf localFirst) Len() int { return leasehold.LocalTurns(lf.Client) }
