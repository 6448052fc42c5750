module github.com/leasehold/leasehold/scripts/release

go 1.26.0

require (
	github.com/leasehold/leasehold v0.1.0
	golang.org/x/mod v0.42.0
)
