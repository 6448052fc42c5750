# Every Go module in the repository; the heavy clients live in their own.
MODULES := . store/redisstore store/etcdstore store/pgstore fence/pgfence prom drill cmd/leasehold bench e2e
GO      ?= go

.PHONY: test deps
# test: install the test servers when missing, then vet and race-test every module.
# A package that hangs fails after 5 minutes instead of go test's default 10.
test: deps
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...); \
	done
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

deps:
	@scripts/ensure-deps.sh redis-server=redis-server initdb=postgresql psql=postgresql-client etcd=etcd-server promtool=prometheus chromium=chromium
