// Package e2e holds the end-to-end tests that need several real components
// at once: locks on a real redis-server, writes fenced in a real PostgreSQL
// and in Redis. It has no code of its own; it is a module so that neither
// backend's module depends on the other.
package e2e
