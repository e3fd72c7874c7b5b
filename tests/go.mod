module github.com/jetrl/jetrl/tests

go 1.26.0

require (
	github.com/jetrl/jetrl/cmd/jetrl v0.0.0
	github.com/jetrl/jetrl/proto v0.0.0
	github.com/jetrl/jetrl/services/advantage-normalizer v0.0.0
	github.com/jetrl/jetrl/services/env v0.0.0
	github.com/jetrl/jetrl/services/replay-buffer v0.0.0
	github.com/jetrl/jetrl/services/rollout v0.0.0
	github.com/jetrl/jetrl/services/trainer v0.0.0
	github.com/jetrl/jetrl/shared v0.0.0
)

replace (
	github.com/jetrl/jetrl/cmd/jetrl => ../cmd/jetrl
	github.com/jetrl/jetrl/proto => ../proto
	github.com/jetrl/jetrl/services/advantage-normalizer => ../services/advantage-normalizer
	github.com/jetrl/jetrl/services/env => ../services/env
	github.com/jetrl/jetrl/services/replay-buffer => ../services/replay-buffer
	github.com/jetrl/jetrl/services/rollout => ../services/rollout
	github.com/jetrl/jetrl/services/trainer => ../services/trainer
	github.com/jetrl/jetrl/shared => ../shared
)
