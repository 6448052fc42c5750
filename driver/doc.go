// Package driver is what a leasehold store implements, as database/sql/driver
// is to database/sql: the Store interface and its optional abilities, what a
// store reports (Info), the errors it answers with, and the input rules every
// store enforces the same way (keys, tokens, TTLs and their limits).
//
// Applications use package leasehold; they need this package only to name a
// Store. A new backend proves itself with the conformance suite in package
// storetest.
package driver
