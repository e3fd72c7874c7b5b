// Command jetrl is the operator CLI: run the whole mesh in one process (up), evaluate weights (eval),
// read a run's streams back (replay), and ask a running mesh for its counters (status).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

type globals struct{}

type cli struct {
	Up     upCmd     `cmd:"" help:"Start NATS (embedded unless --nats) and all five services, train, and write results."`
	Eval   evalCmd   `cmd:"" help:"Evaluate weights (or the random / scripted policy) on held-out instances."`
	Replay replayCmd `cmd:"" help:"Print a stream of a run as JSON lines, from a sequence or a time."`
	Status statusCmd `cmd:"" help:"Print the counters of every service replica of a running mesh."`
	Config configCmd `cmd:"" help:"Write (set) or print (show) the run config in KV that every service process takes its settings from."`
	Report reportCmd `cmd:"" help:"Train the full method, its ablations and each family alone over several seeds; write a markdown table and learning curves."`
	Bench  benchCmd  `cmd:"" help:"Performance benchmarks: async-vs-sync, memory, mesh, scale, weights."`
}

func main() {
	var c cli
	k := kong.Parse(&c, kong.Name("jetrl"), kong.Description("jetrl: asynchronous multi-turn RL for tool-using agents on NATS JetStream."),
		kong.UsageOnError(), kong.Configuration(loadRunConfig))
	k.FatalIfErrorf(k.Run(&globals{}))
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// twoSignalContexts returns first, cancelled by the first SIGINT or SIGTERM, and second, cancelled by
// the next one: a command can wind down gracefully on the first and give up on the second.
func twoSignalContexts() (first, second context.Context, stop func()) {
	first, cancelFirst := context.WithCancel(context.Background())
	second, cancelSecond := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
				if n == 0 {
					cancelFirst()
					continue
				}
				cancelSecond()
				return
			case <-done:
				return
			}
		}
	}()
	return first, second, func() {
		signal.Stop(sigs)
		close(done)
		cancelFirst()
		cancelSecond()
	}
}
