module github.com/jetrl/jetrl/services/env

go 1.26.0

require (
	github.com/jetrl/jetrl/proto v0.0.0
	github.com/jetrl/jetrl/shared v0.0.0
)

require github.com/alecthomas/kong v1.17.0 // indirect

replace (
	github.com/jetrl/jetrl/proto => ../../proto
	github.com/jetrl/jetrl/shared => ../../shared
)
