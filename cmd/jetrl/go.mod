module github.com/jetrl/jetrl/cmd/jetrl

go 1.26.0
