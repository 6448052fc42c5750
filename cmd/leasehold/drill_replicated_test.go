package main_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// replicatedJobs is the size of the drills on replicated Redis: enough for
// takeovers and faults, short enough for three topologies in parallel.
// etcdJobs is etcd's: its TTL is its 1 s lease, not 300 ms, and a drill of
// 8 jobs took 13 to 37 s there.
const (
	replicatedJobs = 8
	etcdJobs       = 4
)

// seconds is a duration in JSON's seconds, read to the nearest nanosecond.
type seconds time.Duration

func (s *seconds) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*s = seconds(math.Round(f * float64(time.Second)))
	return nil
}

func (s seconds) String() string { return time.Duration(s).String() }

// drillJSON is what these tests read of drill -o json.
type drillJSON struct {
	Store            string         `json:"store"`
	Storage          string         `json:"storage"`
	Jobs             int            `json:"jobs"`
	NoFencing        bool           `json:"no_fencing"`
	CriticalSections int            `json:"critical_sections"`
	Ops              map[string]int `json:"ops"`
	Effects          map[string]int `json:"effects"`
	StaleRefused     int            `json:"stale_writes_refused"`
	TTL              seconds        `json:"ttl_seconds"`
	TakeoverP99      seconds        `json:"takeover_p99_seconds"`
	TakeoverSLO      seconds        `json:"takeover_slo_seconds"`
	Workers          int            `json:"workers"`
	Violations       []struct {
		Check, Detail string
	} `json:"safety_violations"`
	Shortfalls []struct {
		Check, Detail string
	} `json:"liveness_shortfalls"`
	Cleanup  string `json:"cleanup"`
	Verdict  string `json:"verdict"`
	ExitCode int    `json:"exit_code"`
}

// drillOnReplicated runs "leasehold drill" with storeArgs, fenced, while a
// second drill is started on the same store and must be refused, and checks
// the first: exit 0 (or 3, a liveness shortfall alone), the report names
// the store (wantStore), every job done through fenced writes, no safety
// violation. st is an application's view of the
// same store; flags are more drill flags.
func drillOnReplicated(t *testing.T, st driver.Store, storeArgs []string, wantStore string, jobs int, flags ...string) drillJSON {
	t.Helper()
	args := append(append(append([]string{"drill"}, storeArgs...), flags...),
		"--jobs", strconv.Itoa(jobs), "-o", "json")
	start := time.Now()
	first := startBg(t, args...)

	// The second drill, while the first holds drill:run: refused at once,
	// naming the first one's process. drill:run is watched in process, not
	// with inspect, to start the second drill well before the first ends.
	eventually(t, 30*time.Second, "the first drill holds drill:run", func() bool {
		info, err := st.Inspect(context.Background(), "drill:run")
		return err == nil && info.Held
	})
	second := failsWith(t, 1, []string{"another drill is running", ":" + strconv.Itoa(first.pid())},
		append(append([]string{"drill"}, storeArgs...), "--jobs", "1", "--quiet")...)
	if second.stdout != "" {
		t.Errorf("the refused drill printed a report:\n%s", second.stdout)
	}

	r := first.wait(t, 3*time.Minute) // its --drill-timeout is 2m
	var rep drillJSON
	if r.code != 0 && r.code != 3 || !decodeOK(r.stdout, &rep) {
		t.Fatalf("leasehold %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	t.Logf("drill on %s: exit %d in %v, %d critical sections, takeover p99 %v (SLO %v)", wantStore, r.code, time.Since(start).Round(time.Millisecond),
		rep.CriticalSections, time.Duration(rep.TakeoverP99).Round(time.Millisecond), rep.TakeoverSLO)
	if !strings.HasPrefix(rep.Store, wantStore) {
		t.Errorf("the report's store is %q, want %q…", rep.Store, wantStore)
	}
	done := !slices.ContainsFunc(rep.Shortfalls, func(s struct{ Check, Detail string }) bool { return s.Check == "jobs-unfinished" })
	if rep.Jobs != jobs || rep.NoFencing || rep.Ops["write ok"] == 0 || done && (rep.CriticalSections < jobs || rep.Ops["write ok"] < jobs || rep.Ops["acquire ok"] < jobs) {
		t.Errorf("the drill did not run its %d jobs fenced: %+v", jobs, rep)
	}
	// Liveness is timing, which a loaded machine may miss (exit 3); safety
	// is not.
	for _, v := range rep.Violations {
		t.Errorf("safety violation %s: %s", v.Check, v.Detail)
	}
	t.Logf("liveness shortfalls (timing, not asserted): %+v", rep.Shortfalls)
	if rep.ExitCode != r.code || !strings.Contains(r.stdout, `"safety_violations": [`) || !strings.Contains(r.stdout, `"liveness_shortfalls": [`) {
		t.Errorf("exit %d, the report says %d; safety violations %+v, liveness shortfalls %+v", r.code, rep.ExitCode, rep.Violations, rep.Shortfalls)
	}
	return rep
}

// decodeOK reports whether out is JSON that unmarshals into v.
func decodeOK(out string, v any) bool {
	return json.Unmarshal([]byte(out), v) == nil
}

// TestDrillOnReplicatedStores runs the drill binary on a Redis Cluster, a
// Redis primary behind three Sentinels and a 3-member etcd cluster, all on
// loopback, from the command line as an operator would point it at their
// own store: each drill runs its jobs fenced, a second drill is refused
// while it runs, and it leaves only the keys the documentation says it
// leaves.
func TestDrillOnReplicatedStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := testserver.StartRedisCluster(t, 3)
		addrs := cl.Addrs()
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		appStore := appClient(t, cc).Store()
		// The job keys live on more than one master, so the drill works
		// across slots (its cleanup deletes one fence key a call).
		masters := map[string]bool{}
		for i := range replicatedJobs {
			m, err := cc.MasterForKey(ctx, drill.JobKey(i))
			if err != nil {
				t.Fatal(err)
			}
			masters[m.Options().Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("the %d job keys are all on %v: the test would not cross slots", replicatedJobs, masters)
		}

		u := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
		rep := drillOnReplicated(t, appStore, []string{"--redis", u}, "redis at cluster "+strings.Join(addrs, ","), replicatedJobs, "--time-scale", "1/200")
		if !strings.Contains(rep.Cleanup, "no drill key left") {
			t.Errorf("cleanup %q", rep.Cleanup)
		}
		for _, a := range addrs {
			if left := redisKeys(t, a, "*drill:*"); len(left) != 0 {
				t.Errorf("master %s keeps %q after the drill", a, left)
			}
		}
	})

	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		primary := testserver.StartRedis(t)
		var sentinels []string
		for range 3 {
			s, err := testserver.NewRedisSentinel("drillmaster", primary.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			sentinels = append(sentinels, s.Addr())
		}
		appStore := appClient(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "drillmaster", SentinelAddrs: sentinels})).Store()
		// The Sentinels as a comma-separated host list: it used to reach
		// go-redis as one host name, "[s1,s2,s3's host]:s3's port".
		u := "redis+sentinel://" + strings.Join(sentinels, ",") + "/0?master_name=drillmaster"
		rep := drillOnReplicated(t, appStore, []string{"--redis", u}, "redis at sentinel "+strings.Join(sentinels, ",")+" master drillmaster/0", replicatedJobs, "--time-scale", "1/200")
		if !strings.Contains(rep.Cleanup, "no drill key left") {
			t.Errorf("cleanup %q", rep.Cleanup)
		}
		if left := redisKeys(t, primary.Addr(), "*drill:*"); len(left) != 0 {
			t.Errorf("the primary keeps %q after the drill", left)
		}
	})

	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		c := testserver.StartEtcdCluster(t, 3)
		eps := c.Endpoints()
		ec, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ec.Close() })
		appStore, err := etcdstore.New(ec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = appStore.Close() })
		storeArgs := []string{"--etcd", strings.Join(eps, ",")}
		// A time scale whose TTL is shorter than etcd's lease is refused:
		// its paused workers would keep their locks. It used to run, with
		// no stale write ever tried and every takeover over the SLO.
		failsWith(t, 1, []string{"--time-scale 1/200 gives a TTL of 300ms", "holds a lease for 1s", "--time-scale 1/60"},
			append(storeArgs, "drill", "--time-scale", "1/200", "--jobs", "1")...)
		// Without --time-scale the TTL is etcd's shortest lease (1 s with
		// testserver's timings), and pauses past it lose the lock.
		rep := drillOnReplicated(t, appStore, storeArgs, "etcd at "+strings.Join(eps, ","), etcdJobs)
		if time.Duration(rep.TTL) != time.Second {
			t.Errorf("the drill's TTL on etcd is %v, want its 1s lease", rep.TTL)
		}
		// A stopped holder's etcd lease ends up to 500 ms (etcd's lessor
		// loop) after its TTL; the default SLO allows for it.
		if want := time.Second + time.Second/3 + 500*time.Millisecond; time.Duration(rep.TakeoverSLO) != want {
			t.Errorf("takeover SLO on etcd %v, want %v", rep.TakeoverSLO, want)
		}
		if rep.Effects["pause-past-ttl"] > 0 && rep.Ops["release not owned"]+rep.StaleRefused == 0 {
			t.Errorf("%d workers paused past their TTL, and none was refused a release or a write: ops %v", rep.Effects["pause-past-ttl"], rep.Ops)
		}
		// etcd keeps the fences (docs/drill.md): one a job, one for
		// drill:run, under the prefix the cleanup line names, and nothing
		// else; no lock is left.
		const fences = "leasehold/fence/drill:"
		if !strings.Contains(rep.Cleanup, "etcdctl del --prefix '"+fences+"'") {
			t.Errorf("cleanup %q does not name %s", rep.Cleanup, fences)
		}
		left := drillKeys(t, ec)
		for _, k := range left {
			if !strings.HasPrefix(k, fences) {
				t.Errorf("the drill left %q, not a fence", k)
			}
		}
		if len(left) != etcdJobs+1 {
			t.Errorf("the drill left %d keys, want its %d job fences and drill:run's: %q", len(left), etcdJobs, left)
		}
	})
}

// The PostgreSQL example of the README: locks and fenced jobs in one
// PostgreSQL, the locks in pgstore's table made beforehand.
func TestDrillOnPostgresLocksAndJobs(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	appStore := migratedStore(t, srv.DSN())
	rep := drillOnReplicated(t, appStore, []string{"--postgres", srv.DSN()}, "postgres at ", replicatedJobs, "--jobs-postgres", srv.DSN(), "--time-scale", "1/200")
	if rep.Storage != "postgres" || !strings.Contains(rep.Cleanup, `DELETE FROM "`+pgstore.DefaultTable+`"`) || !strings.Contains(rep.Cleanup, "drill_jobs") {
		t.Errorf("storage %q, cleanup %q", rep.Storage, rep.Cleanup)
	}
}

// redisKeys are the keys matching pattern on the Redis at addr (one node).
func redisKeys(t *testing.T, addr, pattern string) []string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
