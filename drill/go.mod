module github.com/leasehold/leasehold/drill

go 1.26.0

require github.com/leasehold/leasehold v0.0.0

replace github.com/leasehold/leasehold => ../
