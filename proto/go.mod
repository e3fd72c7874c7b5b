module github.com/jetrl/jetrl/proto

go 1.26.0
