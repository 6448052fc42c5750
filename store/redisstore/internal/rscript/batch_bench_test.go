package rscript

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// Scripts about as heavy as redisstore's acquire and release (a fence
// read and write, the server's time, a queue check, a publish).
var (
	benchTake = Once(`local last = redis.call('GET', KEYS[2])
redis.call('EXISTS', KEYS[3])
if redis.call('PTTL', KEYS[1]) ~= -2 then return {0, 0} end
local t = redis.call('TIME')
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], t[1] .. t[2])
return {1, t[1] .. t[2]}`)
	benchGive = Once(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('EXISTS', KEYS[2])
redis.pcall('PUBLISH', ARGV[2], '')
return 1`)
)

// BenchmarkBatcherFlights compares flight counts in interleaved rounds:
// goroutines each taking and giving back a key of their own, reported as
// the medians of the rounds for each flight count (cycles per second, cores
// busy, CPU per cycle).
//
//	go test -run '^$' -bench BatcherFlights -benchtime 1x
func BenchmarkBatcherFlights(b *testing.B) {
	srv, client, c := benchClient(b)
	const rounds, cell = 7, 300 * time.Millisecond
	for _, conc := range []int{1, 16, 64} {
		var figs cycleFigures
		for r := range rounds {
			for _, f := range []int{1, 2, 3} {
				bt := NewBatcher(client, c, DefaultBatchSize)
				bt.flights = f
				name := fmt.Sprintf("f%d", f)
				figs.cycles(b, srv.Pid(), conc, cell, name, fmt.Sprintf("b%d:%d:%s", conc, r, name), benchTake, benchGive,
					func(ctx context.Context, sc Script, keys []string, args ...any) error {
						return bt.Run(ctx, sc, keys, args, nil).Err()
					})
			}
		}
		for _, f := range []int{1, 2, 3} {
			figs.report(b, fmt.Sprintf("c%d-", conc), fmt.Sprintf("f%d", f))
		}
	}
}

// Scripts that do nothing: what a batch costs without the scripts' work.
var (
	benchNopTake = Once(`return 1`)
	benchNopGive = Once(`return 2`)
)

// BenchmarkBatcherShapes asks where the cores go at 64 goroutines: for the
// scripts above and for scripts that do nothing, sent unbatched and through
// Batchers of several batch sizes and flight counts, in interleaved rounds,
// it reports the median cycles per second, the cores this process and
// redis-server kept busy together, and their CPU per cycle.
//
//	go test -run '^$' -bench BatcherShapes -benchtime 1x
func BenchmarkBatcherShapes(b *testing.B) {
	srv, client, c := benchClient(b)
	pid := srv.Pid()
	type shape struct {
		name          string
		size, flights int // 0: unbatched
		take, give    Script
	}
	var shapes []shape
	for _, s := range []struct {
		name       string
		take, give Script
	}{{"nop", benchNopTake, benchNopGive}, {"heavy", benchTake, benchGive}} {
		shapes = append(shapes, shape{s.name + "-unbatched", 0, 0, s.take, s.give})
		for _, sf := range [][2]int{{DefaultBatchSize, batchFlights}, {16, 6}, {8, 8}, {4, 16}} {
			shapes = append(shapes, shape{fmt.Sprintf("%s-%dx%d", s.name, sf[0], sf[1]), sf[0], sf[1], s.take, s.give})
		}
	}
	const rounds, cell, conc = 7, 400 * time.Millisecond, 64
	var figs cycleFigures
	for r := range rounds {
		for _, sh := range shapes {
			var bt *Batcher
			if sh.size > 0 {
				bt = NewBatcher(client, c, sh.size)
				bt.flights = sh.flights
			}
			figs.cycles(b, pid, conc, cell, sh.name, fmt.Sprintf("s%d:%s", r, sh.name), sh.take, sh.give,
				func(ctx context.Context, sc Script, keys []string, args ...any) error {
					if bt == nil {
						return sc.Run(ctx, client, keys, args...).Err()
					}
					return bt.Run(ctx, sc, keys, args, nil).Err()
				})
		}
	}
	for _, sh := range shapes {
		figs.report(b, "", sh.name)
	}
}

// cycleFigures are the figures of the rounds of several ways, by name.
type cycleFigures struct{ rate, busy, perCycle map[string][]float64 }

// runner sends one script call, as the way under measurement sends it.
type runner func(ctx context.Context, sc Script, keys []string, args ...any) error

// cycles records the cycles of take and give that conc goroutines, each
// with a key of its own under prefix, make through run in one cell: cycles
// per second, the cores this process and redis-server (pid) kept busy
// together, and their CPU per cycle in µs, appended to m under name.
func (m *cycleFigures) cycles(b *testing.B, pid, conc int, cell time.Duration, name, prefix string, take, give Script, run runner) {
	var n atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), cell)
	defer cancel()
	var wg sync.WaitGroup
	self0, srv0, t0 := selfCPU(), pidCPU(pid), time.Now()
	for w := range conc {
		wg.Go(func() {
			k := fmt.Sprintf("{%s:%d}", prefix, w)
			keys := []string{k, k + "f", k + "q"}
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := run(cctx, take, keys, "tok", 60000); err != nil {
					b.Error(err)
				}
				if err := run(cctx, give, keys[:2], "tok", "chan"); err != nil {
					b.Error(err)
				}
				ccancel()
				n.Add(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	cpu := selfCPU() - self0 + pidCPU(pid) - srv0
	if m.rate == nil {
		m.rate, m.busy, m.perCycle = map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	}
	m.rate[name] = append(m.rate[name], float64(n.Load())/wall.Seconds())
	m.busy[name] = append(m.busy[name], cpu.Seconds()/wall.Seconds())
	m.perCycle[name] = append(m.perCycle[name], float64(cpu.Microseconds())/float64(max(n.Load(), 1)))
}

// report reports the medians of the rounds of way name, the metrics named
// prefix+name+"-cycles/s", "-cores" and "-µs/cycle".
func (m *cycleFigures) report(b *testing.B, prefix, name string) {
	median := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	b.ReportMetric(median(m.rate[name]), prefix+name+"-cycles/s")
	b.ReportMetric(median(m.busy[name]), prefix+name+"-cores")
	b.ReportMetric(median(m.perCycle[name]), prefix+name+"-µs/cycle")
}

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is the on-CPU time of every thread of the process pid (it runs on
// this machine), from /proc/PID/task/*/schedstat.
func pidCPU(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				sum += time.Duration(ns)
			}
		}
	}
	return sum
}

// benchClient starts a redis-server of the benchmark's own and returns it,
// a client of it, closed with the benchmark, and the client's Caller.
func benchClient(b *testing.B) (*testserver.RedisServer, *redis.Client, Caller) {
	srv := testserver.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 80})
	b.Cleanup(func() { _ = client.Close() })
	c, err := CheckClient(client)
	if err != nil {
		b.Fatal(err)
	}
	return srv, client, c
}

// BenchmarkBatcherVsFullDuplex sets the Batcher beside go-redis's
// full-duplex autopipeliner (AutoPipelineOptions.FullDuplex, experimental
// in go-redis v9.23), which hands each reply to its caller as soon as it is
// read where a pipeline returns its replies together. Each goroutine takes
// and gives back a key of its own with the scripts above, as the Store
// would send them on the autopipeliner: Submit, then WaitContext under the
// caller's context. "fd-hooked" is the same on a client with one hook that
// does nothing, as redisotel's would: go-redis then runs each command's hook
// chain on a goroutine of its own. Interleaved rounds; medians of cycles per
// second, of the cores this process and redis-server kept busy, and of
// their CPU per cycle.
//
//	go test -run '^$' -bench BatcherVsFullDuplex -benchtime 1x
func BenchmarkBatcherVsFullDuplex(b *testing.B) {
	srv, client, c := benchClient(b)
	pid := srv.Pid()
	fullDuplex := func(hooked bool) *redis.AutoPipeliner {
		cl := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 80})
		b.Cleanup(func() { _ = cl.Close() })
		if hooked {
			cl.AddHook(nopHook{})
		}
		cfg := redis.DefaultAutoPipelineOptions()
		cfg.FullDuplex = true
		ap, err := cl.AsyncAutoPipelineWithOptions(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return ap
	}
	ctx := context.Background()
	for _, sc := range []Script{benchTake, benchGive} {
		if err := sc.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	type way struct {
		name string
		ap   *redis.AutoPipeliner // nil: the Batcher
	}
	ways := []way{{"batcher", nil}, {"fd", fullDuplex(false)}, {"fd-hooked", fullDuplex(true)}}
	const rounds, cell = 7, 400 * time.Millisecond
	for _, conc := range []int{1, 16, 64} {
		var figs cycleFigures
		for r := range rounds {
			for _, w := range ways {
				bt := NewBatcher(client, c, DefaultBatchSize)
				figs.cycles(b, pid, conc, cell, w.name, fmt.Sprintf("v%d:%d:%s", conc, r, w.name), benchTake, benchGive,
					func(ctx context.Context, sc Script, keys []string, args ...any) error {
						if w.ap == nil {
							return bt.Run(ctx, sc, keys, args, nil).Err()
						}
						cmd := newCmd(ctx, "evalsha", sc.hash, keys, args)
						if err := w.ap.Submit(ctx, sc.wrap(cmd)).WaitContext(ctx); err != nil {
							return err
						}
						return cmd.Err()
					})
			}
		}
		for _, w := range ways {
			figs.report(b, fmt.Sprintf("c%d-", conc), w.name)
		}
	}
}

// BenchmarkBatcherDetached measures what a client without
// ContextTimeoutEnabled (go-redis's default) costs: go-redis does not follow
// the context on the socket, so a Batcher runs each call that can be
// cancelled on a flush goroutine, even alone, where with
// ContextTimeoutEnabled a lone call goes out on its caller's goroutine.
// Each goroutine takes and gives back a key of its own, under a context
// with a deadline, as the Client's calls are; interleaved rounds, medians
// of cycles per second and of client + server CPU per cycle.
//
//	go test -run '^$' -bench BatcherDetached -benchtime 1x
func BenchmarkBatcherDetached(b *testing.B) {
	srv, client, c := benchClient(b)
	pid := srv.Pid()
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 80})
	b.Cleanup(func() { _ = plain.Close() })
	pc, err := CheckClient(plain)
	if err != nil || !pc.detach {
		b.Fatalf("CheckClient of a client without ContextTimeoutEnabled: %+v, %v; want a detached Caller", pc, err)
	}
	type way struct {
		name   string
		client redis.UniversalClient
		c      Caller
	}
	ways := []way{{"ctx-timeouts", client, c}, {"detached", plain, pc}}
	const rounds, cell = 7, 400 * time.Millisecond
	for _, conc := range []int{1, 16, 64} {
		var figs cycleFigures
		for r := range rounds {
			for _, w := range ways {
				bt := NewBatcher(w.client, w.c, DefaultBatchSize)
				figs.cycles(b, pid, conc, cell, w.name, fmt.Sprintf("d%d:%d:%s", conc, r, w.name), benchTake, benchGive,
					func(ctx context.Context, sc Script, keys []string, args ...any) error {
						return bt.Run(ctx, sc, keys, args, nil).Err()
					})
			}
		}
		for _, w := range ways {
			figs.report(b, fmt.Sprintf("c%d-", conc), w.name)
		}
	}
}

// nopHook is a go-redis hook that does nothing.
type nopHook struct{}

func (nopHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (nopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (nopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
