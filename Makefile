# Every Go module in the repository; the heavy clients live in their own.
MODULES := . store/redisstore store/etcdstore store/kubestore store/pgstore fence/pgfence prom otel gocronlock drill cmd/leasehold bench e2e scripts/release
GO      ?= go
# Prometheus rule files, and their promtool unit tests (*_test.yml).
RULE_TESTS := $(wildcard deploy/prometheus/*_test.yml)
RULE_FILES := $(filter-out $(RULE_TESTS),$(wildcard deploy/prometheus/*.yml))

.PHONY: test deps release-check tidy leasehold
# leasehold: the CLI, at cmd/leasehold/leasehold, stamped with the git commit it is built
# from and -dirty for uncommitted changes (leasehold version). go stamps no VCS information
# in a go.work workspace unless asked (-buildvcs=true, which also gives the version of a
# tagged commit), and none in a git worktree: the commit is also passed with -X.
REVISION = $(shell git rev-parse HEAD 2>/dev/null)$(shell git rev-parse HEAD >/dev/null 2>&1 && test -n "$$(git status --porcelain)" && echo -dirty)
leasehold:
	cd cmd/leasehold && $(GO) build -buildvcs=true -ldflags "-X github.com/leasehold/leasehold/cmd/leasehold/internal/cli.buildRevision=$(REVISION)" -o leasehold .
# test: install the test servers when missing, then vet and race-test every module.
# A package that hangs fails after 5 minutes instead of go test's default 10;
# e2e gets 30: its multi-node drills (Sentinel and Cluster with and without
# replica acknowledgement, the clock drills, etcd, PostgreSQL) take about 15.
test: deps
	@set -e; for m in $(MODULES); do \
		echo "== $$m"; t=5m; [ $$m = e2e ] && t=30m; \
		(cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $$t ./...); \
	done
	promtool check rules $(RULE_FILES)
	promtool test rules $(RULE_TESTS)
	@$(MAKE) --no-print-directory release-check

# release-check: serve the published modules of the work tree from a file-system
# module proxy, as a release would tag them, then go get each one into a module
# outside the repository and run a program that locks on every backend. No
# network: third-party modules come from the module cache the tests filled.
release-check: deps
	cd scripts/release && LEASEHOLD_RELEASE_CHECK=1 $(GO) test -count=1 -v -timeout 10m -run '^TestReleaseCheck$$' .

# tidy: go mod tidy in every module; our own modules come from the work tree.
tidy:
	$(GO) run ./scripts/release tidy

# deps also builds kube-apiserver, which Debian does not package, and etcd at the
# release of the client etcdstore uses (Debian's is 3.4), into a cache outside the
# repository when they are not there (about 6 minutes and 1 minute cold).
deps:
	@scripts/ensure-deps.sh git=git ip=iproute2 iptables=iptables redis-server=redis-server redis-cli=redis-tools initdb=postgresql psql=postgresql-client etcd=etcd-server promtool=prometheus chromium=chromium faketime=faketime
	@scripts/kube-apiserver.sh >/dev/null
	@scripts/etcd.sh >/dev/null
