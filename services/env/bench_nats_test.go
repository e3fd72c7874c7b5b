package env_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jetrl/jetrl/proto"
	"github.com/jetrl/jetrl/services/env"
	"github.com/jetrl/jetrl/services/env/task/builtin"
	"github.com/jetrl/jetrl/shared/bus"
	"github.com/jetrl/jetrl/shared/envclient"
	"github.com/rs/zerolog"
)

// benchHost starts an embedded server and one env host with the built-in families.
func benchHost(b *testing.B, capacity int) (*envclient.Client, *env.Host) {
	b.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	hc, err := bus.Connect(ctx, srv.URL(), "bench-host", zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	h, err := env.New(env.Config{Capacity: capacity}, env.Deps{Conn: hc, Families: builtin.Registry(), Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; hc.Close() })
	for !h.Running() {
		time.Sleep(time.Millisecond)
	}
	cc, err := bus.Connect(ctx, srv.URL(), "bench-client", zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Close)
	return envclient.New(cc, envclient.Config{}), h
}

// BenchmarkStepOverNATS measures one env step as a client sees it: a request over NATS on loopback to a
// host, the game's step, and the reply. It reports the p50 and p99 latency of the steps it timed.
func BenchmarkStepOverNATS(b *testing.B) {
	for _, family := range builtin.Registry().Names() {
		b.Run(family, func(b *testing.B) {
			client, _ := benchHost(b, 1<<20)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			var seed uint64
			var start *proto.EnvStartReply
			var adm []proto.ToolCall
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if start == nil || len(adm) == 0 {
					b.StopTimer()
					seed++
					var err error
					start, err = client.Start(ctx, proto.EnvStartRequest{Task: family, Split: proto.SplitTrain, Seed: seed})
					if err != nil {
						b.Fatal(err)
					}
					adm = start.Admissible
					b.StartTimer()
				}
				t0 := time.Now()
				rep, err := client.Step(ctx, start.HostID, start.SessionID, adm[i%len(adm)])
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				adm = rep.Admissible
				if rep.Done {
					start = nil
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkSessionsPerGiB opens sessions on one host over NATS and reports how many fit in 1 GiB of the
// host process's heap after one step each (the heap growth per held session, extrapolated). Run it with
// -benchtime 1x.
func BenchmarkSessionsPerGiB(b *testing.B) {
	const sessions = 2000
	for _, family := range builtin.Registry().Names() {
		b.Run(family, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				client, host := benchHost(b, 1<<20)
				ctx := context.Background()
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				rssBefore := rssBytes(b)
				for s := 0; s < sessions; s++ {
					rep, err := client.Start(ctx, proto.EnvStartRequest{Task: family, Split: proto.SplitTrain, Seed: uint64(s + 1)})
					if err != nil {
						b.Fatal(err)
					}
					// One step, so that what a session builds lazily (db opens its database) is counted.
					call := rep.Admissible[0]
					if step, err := client.Step(ctx, rep.HostID, rep.SessionID, call); err != nil || step.Done {
						b.Fatalf("first step of session %d: %v (done %v)", s, err, step != nil && step.Done)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if host.Active() != sessions {
					b.Fatalf("host holds %d sessions, want %d", host.Active(), sessions)
				}
				// The Go heap misses memory that C-like allocators map themselves (the SQLite engine does); the
				// resident set counts it, so the larger of the two is reported.
				heap := float64(after.HeapAlloc-before.HeapAlloc) / sessions
				rss := float64(rssBytes(b)-rssBefore) / sessions
				perSession := max(heap, rss)
				b.ReportMetric(heap/1024, "heap-KiB/session")
				b.ReportMetric(rss/1024, "rss-KiB/session")
				b.ReportMetric(float64(1<<30)/perSession, "sessions/GiB")
			}
		})
	}
}

// rssBytes is the process's resident set size, from /proc/self/statm.
func rssBytes(b *testing.B) int64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("resident set size needs /proc: %v", err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(data), &size, &resident); err != nil {
		b.Fatal(err)
	}
	return resident * int64(os.Getpagesize())
}
