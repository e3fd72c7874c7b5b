package main

// benchCmd groups the performance benchmarks. Each prints a table, or with --json one JSON object.
type benchCmd struct {
	AsyncVsSync benchAsyncCmd   `cmd:"" name:"async-vs-sync" help:"Trained episodes per second, asynchronous mesh against synchronous rollout-then-train, on a long-tailed env."`
	Mesh        benchMeshCmd    `cmd:"" help:"Data-plane throughput through all five services next to a raw JetStream publish-and-consume."`
	Scale       benchScaleCmd   `cmd:"" help:"Throughput with 1, 2 and 4 rollout replicas against latency-bound env hosts."`
	Weights     benchWeightsCmd `cmd:"" help:"Time from the trainer publishing a version to every rollout serving it, next to a raw Object Store put and get."`
}
